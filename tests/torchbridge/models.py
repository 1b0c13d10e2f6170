"""Small PyTorch models for export-parity tests (factories importable by the CLI)."""

from __future__ import annotations

import torch


class ReusedBlock(torch.nn.Module):
    """A model that calls the same Linear and activation twice, and has an in-place op."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.act = torch.nn.GELU()
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc(x))
        h = self.act(self.fc(h))
        h = self.norm(h)
        h.mul_(2.0)  # in place after the norm ran: its recorded output must not change
        return self.head(h)


def reused_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return ReusedBlock()


def tiny_bert() -> torch.nn.Module:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                vocab_size=100, max_position_embeddings=64))


def tiny_vit() -> torch.nn.Module:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    return ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                              image_size=32, patch_size=8, num_channels=3))


def tiny_resnet() -> torch.nn.Module:
    from transformers import ResNetConfig, ResNetModel

    torch.manual_seed(0)
    return ResNetModel(ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1],
                                    layer_type="basic"))


class Autocast(torch.nn.Module):
    """A model whose forward runs its body under torch.autocast (mixed precision)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = ReusedBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.body(x)


def autocast_block() -> torch.nn.Module:
    torch.manual_seed(0)
    return Autocast()


class OnlyIdentity(torch.nn.Module):
    """A model whose one leaf leaves no ONNX node: export parity has nothing to compare."""

    def __init__(self) -> None:
        super().__init__()
        self.skip = torch.nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.skip(x) * 2.0


def only_identity() -> torch.nn.Module:
    return OnlyIdentity()


def broken() -> torch.nn.Module:
    raise RuntimeError("no weights at /nowhere")
