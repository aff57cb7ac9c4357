"""Who may talk to a node: CURVE key pairs, the config's allowlists and the ZAP handler."""
