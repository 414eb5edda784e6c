"""What is loaded where: modules, their files, symbols and unwind sources."""
