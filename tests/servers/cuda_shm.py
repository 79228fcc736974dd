"""CUDA shared memory for the KServe v2 test server (kserve_server.py): opens the raw_handle of
CudaSharedMemoryRegister and gives byte access to the region, as Triton does with
cudaIpcOpenMemHandle.

Two kinds of handle:
  - a real cudaIpcMemHandle_t (64 bytes): opened with libcudart through ctypes
    (cudaSetDevice, cudaIpcOpenMemHandle, cudaMemcpy), so the test server really reads the
    inputs from and writes the outputs to GPU memory. Needs a GPU and libcudart.
  - infergate's emulation ("infergate-emulated-cuda:" + POSIX shm key, zero-padded; see
    backends/device_region.h): mapped from /dev/shm. Accepted only when the server was started
    with --cuda-emulation, so a test can never mistake the emulation for the real thing.

A region object supports region[a:b] (bytes) and region[a:b] = data, like an mmap.
"""
import ctypes
import ctypes.util
import mmap
import os

EMULATED_PREFIX = b"infergate-emulated-cuda:"

_cudart = None


def cudart():
    """libcudart through ctypes, or None (with the reason in cudart.error)."""
    global _cudart
    if _cudart is not None:
        return _cudart or None
    names = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    found = ctypes.util.find_library("cudart")
    if found:
        names.insert(0, found)
    for d in ("/usr/local/cuda/lib64", os.environ.get("CUDA_LIB_DIR", "")):
        if d:
            names += [os.path.join(d, n) for n in ("libcudart.so", "libcudart.so.13")]
    for n in names:
        try:
            _cudart = ctypes.CDLL(n)
            return _cudart
        except OSError:
            continue
    _cudart = False
    return None


def gpu_count():
    lib = cudart()
    if lib is None:
        return 0
    n = ctypes.c_int(0)
    if lib.cudaGetDeviceCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


class CudaError(Exception):
    pass


def _check(lib, rc, what):
    if rc != 0:
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        raise CudaError("%s: cuda error %d (%s)" % (what, rc, lib.cudaGetErrorString(rc).decode()))


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class GpuRegion:
    """A region another process exported with cudaIpcGetMemHandle, opened here."""

    H2D, D2H = 1, 2

    def __init__(self, raw_handle, device_id, byte_size):
        lib = cudart()
        if lib is None:
            raise CudaError("no libcudart: cannot open a CUDA IPC handle")
        if len(raw_handle) != 64:
            raise CudaError("raw_handle must be 64 bytes, got %d" % len(raw_handle))
        self.lib, self.device, self.size = lib, device_id, byte_size
        _check(lib, lib.cudaSetDevice(ctypes.c_int(device_id)), "cudaSetDevice(%d)" % device_id)
        h = _Handle()
        ctypes.memmove(ctypes.byref(h), raw_handle, 64)
        self.ptr = ctypes.c_void_p()
        lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _Handle, ctypes.c_uint]
        _check(lib, lib.cudaIpcOpenMemHandle(ctypes.byref(self.ptr), h, 1), "cudaIpcOpenMemHandle")
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def __getitem__(self, s):
        a, b = s.start or 0, s.stop
        buf = ctypes.create_string_buffer(b - a)
        self.lib.cudaSetDevice(ctypes.c_int(self.device))
        _check(self.lib, self.lib.cudaMemcpy(ctypes.cast(buf, ctypes.c_void_p),
                                             ctypes.c_void_p(self.ptr.value + a), b - a, self.D2H),
               "cudaMemcpy device to host")
        return buf.raw

    def __setitem__(self, s, data):
        a = s.start or 0
        src = ctypes.create_string_buffer(bytes(data), len(data))
        self.lib.cudaSetDevice(ctypes.c_int(self.device))
        _check(self.lib, self.lib.cudaMemcpy(ctypes.c_void_p(self.ptr.value + a),
                                             ctypes.cast(src, ctypes.c_void_p), len(data), self.H2D),
               "cudaMemcpy host to device")

    def close(self):
        if self.ptr:
            self.lib.cudaSetDevice(ctypes.c_int(self.device))
            self.lib.cudaIpcCloseMemHandle(self.ptr)
            self.ptr = None


class EmulatedRegion:
    def __init__(self, key, byte_size):
        fd = os.open("/dev/shm/" + key.lstrip("/"), os.O_RDWR)
        try:
            self.mm = mmap.mmap(fd, byte_size)
        finally:
            os.close(fd)

    def __getitem__(self, s):
        return self.mm[s]

    def __setitem__(self, s, data):
        self.mm[s] = data

    def close(self):
        self.mm.close()


def open_region(raw_handle, device_id, byte_size, allow_emulation):
    """Opens a region; raises CudaError with a message for the client."""
    if raw_handle.startswith(EMULATED_PREFIX):
        if not allow_emulation:
            raise CudaError("this is infergate's emulated CUDA handle; the server was not started "
                            "with --cuda-emulation")
        key = raw_handle[len(EMULATED_PREFIX):].split(b"\0", 1)[0].decode()
        try:
            return EmulatedRegion(key, byte_size)
        except OSError as e:
            raise CudaError("cannot map emulated region %s: %s" % (key, e))
    return GpuRegion(raw_handle, device_id, byte_size)
