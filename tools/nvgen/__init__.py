"""nvgen: per-release tables of NVIDIA's user ABI (escapes, classes,
controls, UVM commands) generated from the vendor archives, with every size
measured by the compiler.  See README.md."""
