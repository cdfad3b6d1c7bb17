"""Skill overlays: replacement tensors from a fine-tuned donor, encoded as the backbone encodes them and
applied by ONNX Runtime at session creation on an unchanged backbone graph (issue 17; seed 004).

- :mod:`.fileformat`: the overlay file (safetensors layout, the backbone's SHA-256 in its metadata);
- :mod:`.encode`: a donor weight in the backbone's own encoding of that linear (fp32, MatMulNBits
  round-to-nearest with bias correction, GGUF Q4_1 / Q8_0 lattices);
- :mod:`.build`: the delta rule (pure) and the overlay of one backbone graph from one donor;
- :mod:`.donor`: the ``[overlay]`` table and its pinned domain corpus (nothing is downloaded);
- :mod:`.donor_training`: donors fine-tuned here on that corpus, seeded and deterministic;
- :mod:`.donor_disk`: a donor fine-tuned elsewhere, read from disk and checked against the backbone;
- :mod:`.routing`: the selection subspaces and the reconstruction-error choice (pure);
- :mod:`.bundle`: one deployable file per skill: the overlay, its routing subspaces and the contract it was
  judged under.
"""
