"""ONNX export in the transformers.js layout: fp32, q8 dynamic int8 and q4 MatMulNBits graphs."""
