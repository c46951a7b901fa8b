from nsys_collective.cli import main

main()
