"""PosNet-Embed forward + backward: the candidates whose comparison chose the plugin's batched product over positions.
Their benchmark (``pe-bench posnet_kernel``) is retired, its decision recorded in examples/benchmarks/cpu/
posnet_kernel.{md,json} and examples/benchmarks/gpu/posnet_kernel.json (its code is in the git history). What stays
is ``setup``, which the tests use to check that the candidates compute the same thing:

  released      ``(x W1).unsqueeze(2).matmul(phi[:T])`` (posnet/modules.py): a broadcast (B,T,d_p,d_p) product
  bmm           the plugin's ``PosNetEmbedding.embed`` without padding: one bmm over positions
  bmm-leftpad   the same module with per-row positions made from a padding mask, as a model makes them
"""
CANDIDATES = ["released", "bmm", "bmm-leftpad"]


def setup(candidate, batch, length, dim, posnet_dim, lmax, seed=0, device="cpu"):
    """(step, forward, leaves) of one candidate: step() runs forward + backward into the leaves' .grad."""
    import torch
    import torch.nn.functional as F

    from pe_plugin.encodings import PE_REGISTRY, Dims, Positions

    torch.manual_seed(seed)
    dims = Dims(dim, 8, 6, lmax, 1, "encoder")
    cls = PE_REGISTRY["posnet_embed"]  # the plugin's own module
    pe = cls.build(cls.config_cls(posnet_dim=posnet_dim, posnet_init="per-matrix", posnet_max_positions=lmax), dims,
                   {}).to(device)
    w1, w2, phi = (pe.kernels[k] for k in ("w1", "w2", "phi"))
    x = torch.randn(batch, length, dim).to(device).requires_grad_()
    grad = torch.randn(batch, length, dim).to(device)
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    nonpad = (torch.arange(length).unsqueeze(0) >= (length - lengths).unsqueeze(1)).to(device)  # (B,T) left padding
    pos = Positions.from_mask(nonpad, length, length, device)  # as a model makes them: the rotated product

    def forward():
        if candidate == "released":
            u = (x @ w1).unsqueeze(2).matmul(phi[:length]).squeeze(2)  # (B,T,1,d_p) @ (T,d_p,d_p), broadcast
            return x + F.relu(u) @ w2
        return pe.embed(x, Positions.for_tokens(x.new_zeros(batch, length).long(), 1) if candidate == "bmm" else pos)

    def step():
        for t in (x, w1, w2, phi):
            t.grad = None
        forward().backward(grad)

    return step, forward, (x, w1, w2, phi)
