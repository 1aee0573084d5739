"""Kernel families: each module renders its instantiation unit from a frozen config and launches it."""
