"""The GGUF writer of the tests (it lives in augserve.engine.gguf_write)."""

from augserve.engine.gguf_write import gguf_name, permute, write_gguf

__all__ = ["gguf_name", "permute", "write_gguf"]
