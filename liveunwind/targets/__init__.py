"""AddressSpace implementations: the only code that touches a target."""
