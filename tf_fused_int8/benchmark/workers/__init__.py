"""The benchmark's worker processes (TF-free except impl_ours/impl_litert): see worker.py."""
