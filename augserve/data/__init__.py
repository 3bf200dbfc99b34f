"""Data shipped with augserve: the INFERCEPT workload (Apache-2.0, see infercept/LICENSE)."""
