"""The single-process reference the PyTorch tests compare with: a small model, each
rank's data, and SGD on the ranks' mean gradient (rank 0's initial parameters)."""

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
