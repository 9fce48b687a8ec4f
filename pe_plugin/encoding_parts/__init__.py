"""What the encodings are built from: the interface (``base``), position limits (``limits``), maps over relative
distances (``relative``), per-head views of projection memory (``head_layout``) and PosNet's shared kernels
(``posnet_kernels``). Nothing here registers an encoding; ``pe_plugin.encodings`` holds the encodings."""
