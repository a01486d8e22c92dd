"""AMD GPU support: code objects, command encoders, drivers and the RDNA3 simulator (tg.runtime.amd.sim)."""
