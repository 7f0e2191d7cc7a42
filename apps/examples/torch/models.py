"""The example models and their data, the same on every rank (no download).

digits: a small CNN on the 8x8 handwritten digits scikit-learn ships (load_digits, 1797
        images, 10 classes), 80 % train / 20 % test, split by a fixed seed.
resnet: a ResNet-style CNN (three stages of basic blocks, GroupNorm, ~2.8 M parameters)
        on generated 3x16x16 images: each of 10 classes is a fixed random pattern, each
        image its class's pattern, randomly shifted, plus noise.
resnet18: ResNet-18 as for CIFAR-10 (a 3x3 stem, four stages of two basic blocks, 64 to
        512 channels, GroupNorm; 11.2 M parameters) on generated CIFAR-shaped 3x32x32
        images made as resnet's are.
transformer: a Transformer encoder classifier (token embedding, learned positions, two
        encoder layers of width 128 with 4 heads, no dropout, mean pooling; 0.4 M
        parameters) on generated sequences of 32 tokens out of 64: the class is the sum
        of the first half's tokens modulo 10. MultiheadAttention reads its out_proj in
        its own forward and the root reads the positions: ServerOptimizer(model=...)
        must wait for both.

Where scikit-learn is missing (the GPU machine), the digits come from the file named by
RACKWEAVE_DIGITS (torch.save of the images and labels: bench/bundle.sh writes it).
"""

import os

import torch
from torch import nn

MODELS = ("digits", "resnet", "resnet18", "transformer")


def digits_arrays():
    """scikit-learn's digits (images 1797 x 8 x 8 in 0..16, labels), or the saved copy."""
    saved = os.environ.get("RACKWEAVE_DIGITS")
    if saved:
        d = torch.load(saved)
        return d["images"], d["target"]
    from sklearn.datasets import load_digits

    d = load_digits()
    return (torch.tensor(d.images, dtype=torch.float32),
            torch.tensor(d.target, dtype=torch.int64))


def digits_data():
    """(x_train, y_train, x_test, y_test): float32 images N x 1 x 8 x 8 in [0, 1]."""
    images, y = digits_arrays()
    x = images.unsqueeze(1) / 16.0
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[order], y[order]
    cut = int(len(y) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def digits_model():
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))


def resnet_data(train=4096, test=1024, side=16):
    g = torch.Generator().manual_seed(4321)
    # Blocky patterns (cells of 4x4 pixels): a shift of a few pixels keeps the class.
    cells = side // 4
    patterns = torch.randn(10, 3, cells, cells, generator=g).repeat_interleave(
        4, 2).repeat_interleave(4, 3)

    def make(n):
        y = torch.randint(0, 10, (n,), generator=g)
        shift = torch.randint(-2, 3, (n, 2), generator=g)
        x = torch.stack([torch.roll(patterns[c], (int(s[0]), int(s[1])), (1, 2))
                         for c, s in zip(y.tolist(), shift)])
        return x + torch.randn(x.shape, generator=g), y

    x_train, y_train = make(train)
    x_test, y_test = make(test)
    return x_train, y_train, x_test, y_test


class _Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(8, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(8, cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.GroupNorm(8, cout))

    def forward(self, x):
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + (x if self.skip is None else self.skip(x)))


def resnet_model():
    # GroupNorm, not BatchNorm: no running statistics, so the parameters are the whole
    # model state and every rank holds the same model.
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.GroupNorm(8, 64), nn.ReLU(),
        _Block(64, 64, 1), _Block(64, 128, 2), _Block(128, 256, 2), _Block(256, 256, 1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10))


def resnet18_model():
    # ResNet-18's layout for 32x32 inputs (a 3x3 stem, no max pool), GroupNorm as above.
    def stage(cin, cout, stride):
        return [_Block(cin, cout, stride), _Block(cout, cout, 1)]

    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.GroupNorm(8, 64), nn.ReLU(),
        *stage(64, 64, 1), *stage(64, 128, 2), *stage(128, 256, 2), *stage(256, 512, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))


def build(name):
    """(model, data): the model made from the current torch seed."""
    if name == "digits":
        return digits_model(), digits_data()
    if name == "resnet":
        return resnet_model(), resnet_data()
    if name == "resnet18":
        return resnet18_model(), resnet_data(train=8192, test=1024, side=32)
    if name == "transformer":
        return TransformerClassifier(), transformer_data()
    raise ValueError(f"unknown model '{name}' ({', '.join(MODELS)})")


def transformer_data(train=8192, test=1024, length=32, vocab=64):
    g = torch.Generator().manual_seed(2718)
    x = torch.randint(0, vocab, (train + test, length), generator=g)
    y = x[:, :length // 2].sum(1) % 10
    return x[:train], y[:train], x[train:], y[train:]


class TransformerClassifier(nn.Module):
    def __init__(self, vocab=64, length=32, width=128, heads=4, layers=2, classes=10):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Parameter(0.02 * torch.randn(length, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x) + self.position).mean(1))
