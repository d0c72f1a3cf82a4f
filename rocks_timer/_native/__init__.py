"""Optional native helpers (built from C at install when a compiler is present)."""
