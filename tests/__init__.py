"""liveunwind's tests: unit/, system/, fuzz/, integration/, and support/ (see tests/README.md)."""
