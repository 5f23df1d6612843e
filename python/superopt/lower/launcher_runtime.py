"""The fixed part of every generated module's launcher, copied into it verbatim.

:func:`superopt.lower.module.module_source` pastes this file's code (everything after the
marker line below) into each generated module, after its ``import torch``: the argument
checks every launcher runs before it enqueues anything, and the compile target. It is a
real module so that it is read, linted and tested as code; the package never imports it
(generated modules are standalone: they import tilelang and torch only).

Owns: the launch-time argument checks and the compile target of generated modules. It is
read as text, never imported by the package.
"""

import torch

# --- copied into generated modules from here ---


class LaunchCheckError(TypeError, ValueError):
    """A launch argument that breaks what the kernels were compiled for; raised before
    any kernel is enqueued."""


def _check(name, t, shape, dtype, device):
    if not isinstance(t, torch.Tensor):
        raise LaunchCheckError(f'{name}: expected a torch.Tensor, got {type(t).__name__}')
    if t.dtype != dtype:
        raise LaunchCheckError(f'{name}: dtype {t.dtype}, expected {dtype} (never '
                               f'reinterpreted; convert with .to({dtype}))')
    if tuple(t.shape) != shape:
        raise LaunchCheckError(f'{name}: shape {tuple(t.shape)}, expected {shape}')
    if t.device != device:
        raise LaunchCheckError(f'{name}: on {t.device}, expected {device}')
    if not t.is_contiguous():
        raise LaunchCheckError(f'{name}: not contiguous (strides {t.stride()}, the kernels '
                               f'read row-major {_row_major(shape)}); pass .contiguous()')
    if t.numel() and t.data_ptr() % 16:
        raise LaunchCheckError(f'{name}: data pointer {t.data_ptr():#x} is not 16-byte '
                               f'aligned (storage offset {t.storage_offset()}); pass .clone()')


def _row_major(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _check_no_alias(what, out, inputs, outputs=()):
    if not out.numel():
        return
    lo = out.data_ptr()
    hi = lo + out.numel() * out.element_size()
    for kind, named in (('input', inputs), ('output', outputs)):
        for name, t in named:
            a = t.data_ptr()
            if t.numel() and a < hi and lo < a + t.numel() * t.element_size():
                raise LaunchCheckError(f'{what} overlaps {kind} {name} in memory; pass a '
                                       'separate output tensor')


def _check_current_device(device):
    if device.type == 'cuda' and torch.cuda.current_device() != device.index:
        raise LaunchCheckError(f'the current CUDA device is cuda:{torch.cuda.current_device()}, '
                               f'but this launcher was loaded for {device}; launch under '
                               f'torch.cuda.device({device.index})')


def _target():
    """sm_90a on Hopper (warp-specialised templates use setmaxnreg), else auto."""
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        return {'kind': 'cuda', 'arch': 'sm_90a'}
    return 'cuda'
