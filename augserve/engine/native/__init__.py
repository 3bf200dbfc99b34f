"""augserve's own CPU kernels for GGUF models kept quantized (docs/engine-quant.md).

`gemm.c` holds weight-only quantized matrix products on int8 activations (integer dot
products), `attention.c` decode attention over the paged cache in place, `decode.c` a
whole Llama-family decode step around them (`native.h`: the formats and shared
helpers); `build.py` compiles them into one library once per machine and loads it;
`qmatrix.py` packs `quant.QTensor` weights into the block formats and multiplies;
`attention.py` serves the decode attention to any CPU model; `decoder.py` runs a decode
step of every layer in one call.
"""
