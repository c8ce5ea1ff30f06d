"""GD508 extension-built-for-other-torch: pass, fail, unknown and not-applicable cases.

A site-packages under tmp_path with a "torch" whose libc10.so and extensions are made by the real
compiler and linker (tests/test_torch_links.py), collected by the real probe.
"""

from __future__ import annotations

from cases import Case
from fakes.site_packages import snapshot_of
from fakes.site_packages import SitePackages
from fakes.torch_extensions import CHECK, CPU_TORCH, CXX11, OLD_ABI, install, libc10


def site(*extensions, break_torch=False):
    def build(tmp):
        packages = SitePackages(tmp / "site-packages")
        packages.torch(version_py=CPU_TORCH, lib=None)
        lib = packages.path / "torch" / "lib"
        (lib / "libc10.so").unlink()
        libc10(lib)
        for name, version, symbols, requires in extensions:
            install(packages, lib, name, version, symbols, requires=requires)
        if break_torch:
            (lib / "libtorch_cpu.so").write_bytes(b"not an ELF file")
        return snapshot_of(packages)
    return build


CASES = [
    Case("extension-built-for-this-torch", "GD508", site(("goodext", "1.0", [CXX11, CHECK], ())), "pass"),
    Case("extension-with-the-other-cxx-abi", "GD508",
         site(("badext", "0.3+cu128torch2.7cxx11abiFALSE", [OLD_ABI, CHECK], ("torch==2.7.0",))), "fail", "error",
         ("will not load with torch 2.11.0+cpu", "c10::detail::torchInternalAssertFail(…)", "_GLIBCXX_USE_CXX11_ABI mismatch",
          "requires torch==2.7.0"), evidence=("files that will not load",), subject="badext", commands=("torch==2.11.0",)),
    Case("torch-libraries-unreadable", "GD508", site(("anyext", "1.0", [OLD_ABI], ()), break_torch=True), "unknown",
         message=("could not be read",)),
    Case("no-torch-linked-extension", "GD508", site(), "not_applicable"),
]
