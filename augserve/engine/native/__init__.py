"""augserve's own CPU kernels for GGUF models kept quantized (docs/engine-quant.md).

`kernels.c` holds weight-only quantized matrix products on int8 activations (integer
dot products) and a whole Llama-family decode step around them; `build.py` compiles it
once per machine and loads it; `qmatrix.py` packs `quant.QTensor` weights into its
block formats and multiplies; `decoder.py` runs a decode step of every layer in one
call.
"""
