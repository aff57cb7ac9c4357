from relay.cli import main

if __name__ == "__main__":  # not when a spawned process (relay bench's) imports it
    main()
