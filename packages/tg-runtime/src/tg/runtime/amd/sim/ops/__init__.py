"""Per-instruction semantics of the RDNA3 emulator, as tables grouped by instruction family."""
