# Put this folder and the repository on PYTHONPATH and every Python process (Beam's local worker processes
# included, which get no --beam_plugins from the FnApiRunner) registers the simulated object store.
import tests.simstore  # noqa: F401
