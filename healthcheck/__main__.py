from healthcheck.cli import main

main()
