"""A process behind a GDB stub: the remote serial protocol, one bounded connection, the address
space.
"""
