"""This process: its own memory read without a fault, a thread's registers and stack copied on a
signal.
"""
