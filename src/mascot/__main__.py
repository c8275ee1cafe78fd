from mascot.cli import main

main()
