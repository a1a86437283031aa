from due.cli import main

main()
