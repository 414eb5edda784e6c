"""From an address space to a finished Backtrace: the walker, warm sessions, names, the API."""
