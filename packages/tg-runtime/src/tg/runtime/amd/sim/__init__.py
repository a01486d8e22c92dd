"""The RDNA3 (gfx1100) simulator: instruction decoder and wave32 emulator (amd.md section 4)."""
