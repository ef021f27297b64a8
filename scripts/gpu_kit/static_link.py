#!/usr/bin/env python3
"""Linker launcher of the GPU kit build: static_link.py --shims=ARCHIVE COMPILER ARGS...

CMake (CMAKE_CXX_LINKER_LAUNCHER) hands it every executable's link line. Debian's CMake packages
(gRPC, protobuf, Abseil, ...) name shared libraries, and the kit must not depend on this
machine's copies, so each shared library with a static archive is swapped for the archive plus
the archives of what it needs (read from its DT_NEEDED, transitively: an archive carries no
dependency list). Two are swapped for small stand-ins (kit_shims.cc): OpenBLAS for the
reference BLAS, ICU's 31 MB data library for an empty table. The CUDA runtime becomes
libcudart_static.a. Still shared, and shipped in the kit by gpu_kit.sh: glibc (a static libc
could not dlopen the driver), and what Debian ships only shared (spdlog, fmt, prometheus-cpp).
cuBLAS and the driver stay shared and come from the GPU machine. libstdc++ and libgcc_s stay
shared too: the worker needs the shared libstdc++ for spdlog and prometheus-cpp anyway (two
copies in one process are not safe), cuBLAS needs libgcc_s, and a static copy in each of the
kit's ten binaries would cost 11 MB of its 60 MiB. Every executable gets RUNPATH $ORIGIN/../lib.
"""
import os
import re
import subprocess
import sys

MULTIARCH = "/usr/lib/x86_64-linux-gnu"
REFERENCE_BLAS = MULTIARCH + "/blas/libblas.a"
SYSTEM_DIRS = (MULTIARCH, "/lib/x86_64-linux-gnu", MULTIARCH + "/openblas-pthread")
# glibc and the GCC runtimes (shipped in the kit), and the GPU machine's own libraries.
KEEP_SHARED = re.compile(
    r"^(libc|libm|libdl|librt|libpthread|libresolv|ld-linux-x86-64|libcuda|libnvidia-.*|"
    r"libcublas|libcublasLt|libstdc\+\+|libgcc_s)\.so")
SHARED = re.compile(r"^(lib.+?)\.so(\.[0-9.]+)?$")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def find_shared(soname):
    for d in SYSTEM_DIRS:
        if os.path.exists(os.path.join(d, soname)):
            return os.path.join(d, soname)
    return None


def replacement(path, shims):
    """Archives that replace a shared library, or None to keep it shared."""
    name = os.path.basename(path)
    if KEEP_SHARED.match(name):
        return None
    if name.startswith("libcudart.so"):
        return [os.path.join(os.path.dirname(os.path.realpath(path)), "libcudart_static.a")]
    if name.startswith("libopenblas.so"):
        return [REFERENCE_BLAS, shims]
    if name.startswith("libicudata.so"):
        return [shims]
    stem = SHARED.match(name).group(1)
    # GCC's own runtimes (libgfortran, libquadmath: the BLAS is Fortran) live in GCC's directory.
    gcc = subprocess.run(["gcc", "-print-file-name=" + stem + ".a"], capture_output=True,
                         text=True).stdout.strip()
    for archive in (os.path.join(os.path.dirname(path), stem + ".a"), gcc):
        if os.path.isabs(archive) and os.path.exists(archive):
            return [archive]
    return None


def main():
    shims = sys.argv[1].removeprefix("--shims=")
    cmd = sys.argv[2:]
    out, pending = [], []
    for arg in cmd:
        if not arg.startswith("-") and SHARED.match(os.path.basename(arg)) and os.path.exists(arg):
            pending.append(arg)
        elif arg.startswith("-l") and (lib := find_shared("lib" + arg[2:] + ".so")) and \
                replacement(lib, shims) is not None:
            pending.append(lib)  # -lre2 and the like: the linker would take the .so
        else:
            out.append(arg)
    archives, shared, seen = [], [], set()
    while pending:
        lib = pending.pop(0)
        real = os.path.realpath(lib)
        if real in seen:
            continue
        seen.add(real)
        swap = replacement(lib, shims)
        if swap is None:
            shared.append(lib)
            continue
        archives += [a for a in swap if a not in archives]
        for dep in needed(real):
            found = find_shared(dep)
            # glibc and the GCC runtimes: the compiler driver links them.
            if found and not KEEP_SHARED.match(dep):
                pending.append(found)
    out += ["-Wl,--start-group"] + archives + ["-Wl,--end-group"] + shared
    out += ["-ldl", "-lrt", "-lpthread", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--enable-new-dtags"]
    if os.environ.get("TANDEM_KIT_LINK_VERBOSE"):
        print("static_link:", " ".join(out), file=sys.stderr)
    os.execvp(out[0], out)


if __name__ == "__main__":
    main()
