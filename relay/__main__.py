from relay.cli import main

main()
