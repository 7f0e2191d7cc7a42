"""The single-process reference the PyTorch tests compare with: a small model, each
rank's data, and SGD on the ranks' mean gradient (rank 0's initial parameters); and the
same training through a node with ServerOptimizer, ranks as threads of this process."""

import torch


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def rank_data(seed, rank):
    g = torch.Generator().manual_seed(seed + rank)
    return torch.randn(16, 4, generator=g), torch.randn(16, 1, generator=g)


def reference_losses(steps, workers, lr_at, data):
    """Per step, each rank's loss: one model, SGD with lr_at(step) on the mean of the
    ranks' gradients (summed in rank order)."""
    model = make_model(0)
    losses = []
    for s in range(steps):
        grads, step_losses = [], []
        for r in range(workers):
            model.zero_grad()
            x, y = data(r)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            step_losses.append(loss.item())
            grads.append([p.grad.clone() for p in model.parameters()])
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                total = grads[0][i]
                for r in range(1, workers):
                    total = total + grads[r][i]
                p -= lr_at(s) * total / workers
        losses.append(step_losses)
    return losses


def server_losses(node, job, steps, workers, lr, data, device="cpu", lazy=False, **options):
    """Per step, each rank's loss: make_model(rank) on `device` (rank 0's values replace
    the others' at the start) trained with ServerOptimizer (sgd, lr) through `node`, the
    ranks as threads of this process; `options` go to ServerOptimizer."""
    import rackweave.torch as rwt
    from rwnode import run_ranks

    got = [[None] * workers for _ in range(steps)]
    # Made here, one after the other: torch's seed is global to the process.
    models = [make_model(r).to(device) for r in range(workers)]

    def rank(r):
        model = models[r]
        opt = rwt.ServerOptimizer(model.named_parameters(), optimizer="sgd", lr=lr,
                                  connect=node, job=job, rank=r, workers=workers,
                                  model=model if lazy else None, **options)
        x, y = (t.to(device) for t in data(r))
        for s in range(steps):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            got[s][r] = loss.item()
        opt.close()

    run_ranks(workers, rank)
    return got


class ReadsElsewhere(torch.nn.Module):
    """Parameters read by a module other than their own: MultiheadAttention reads
    out_proj's weight and bias in its own forward (out_proj's never runs), a
    ParameterList is never called, and `tied` is read through F.linear by this module."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.scales = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.ones(8)) for _ in range(2)])
        self.tied = torch.nn.Linear(8, 8, bias=False)

    def forward(self, x):
        y, _ = self.attn(x, x, x)
        for s in self.scales:
            y = y * s
        return torch.nn.functional.linear(y, self.tied.weight).square().mean()


class Encoder(torch.nn.Module):
    """A Transformer encoder: MultiheadAttention reads out_proj in its own forward, and
    this module's forward reads `position` before any submodule runs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.encoder = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 2)
        self.position = torch.nn.Parameter(0.1 * torch.randn(6, 16))
        self.head = torch.nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x + self.position).mean(1))


def transformer_run(node, job, lazy, staging, steps=3, workers=2, **options):
    """Per step, each rank's loss, and each rank's parameters at the end: an Encoder
    trained by `workers` ranks on different data (ServerOptimizer, momentum 0.9, lr
    0.05; `options` go to it), with or without model= (lazy)."""
    import rackweave.torch as rwt
    from rwnode import run_ranks

    models = [Encoder() for _ in range(workers)]
    losses = [[None] * workers for _ in range(steps)]

    def rank(r):
        m = models[r]
        opt = rwt.ServerOptimizer(m.named_parameters(), optimizer="momentum", lr=0.05,
                                  connect=node, job=job, rank=r, workers=workers,
                                  model=m if lazy else None, staging=staging, **options)
        g = torch.Generator().manual_seed(40 + r)
        try:
            for s in range(steps):
                x, y = torch.randn(4, 6, 16, generator=g), torch.randn(4, 1, generator=g)
                loss = torch.nn.functional.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses[s][r] = loss.item()
            opt.synchronize()
        finally:
            opt.close()

    run_ranks(workers, rank)
    return losses, [[p.detach().clone() for p in m.parameters()] for m in models]
