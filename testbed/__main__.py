from testbed.cli.app import main

main()
