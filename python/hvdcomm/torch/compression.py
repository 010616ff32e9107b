"""hvdcomm.torch.compression: horovod.torch's Compression (none, fp16), the
gradient compressors of allreduce and DistributedOptimizer."""
import torch


class _NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _FP16Compressor:
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class Compression:
    none = _NoneCompressor
    fp16 = _FP16Compressor
