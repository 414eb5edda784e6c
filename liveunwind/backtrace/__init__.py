"""From an address space to a finished Backtrace: the backtracer, warm sessions, names, the API."""
