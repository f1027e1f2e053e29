"""The package's PEP 517 build backend, in the standard library only.

The client installs with ``pip install http/client/python`` on a machine
that reaches no package index (where setuptools or wheel may be absent,
and a build backend from PyPI cannot be fetched): this backend writes the
pure-Python wheel, the editable wheel (PEP 660) and the sdist itself, from
pyproject.toml's [project] table and the version in
wts_client/__init__.py.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "wts_client"


def _project():
    """name, version and the METADATA fields, from pyproject.toml."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    field = lambda key: re.search(r'^%s\s*=\s*"([^"]*)"' % re.escape(key), table, re.M).group(1)
    with open(os.path.join(ROOT, PACKAGE, "__init__.py"), encoding="utf-8") as f:
        version = re.search(r'^__version__\s*=\s*"([^"]+)"', f.read(), re.M).group(1)
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    name = field("name")
    meta = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: %s\n"
            "Description-Content-Type: text/markdown\n\n%s") % (name, version, field("description"), field("requires-python"), readme)
    return name, version, meta


def _dist(name, version):
    return "%s-%s" % (name.replace("-", "_"), version)


def _sources():
    for d, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(d, f)
                yield os.path.relpath(path, ROOT).replace(os.sep, "/"), path


def _wheel(directory, files):
    """Writes a py3-none-any wheel of files (archive name → bytes) and its
    dist-info; returns its file name."""
    name, version, meta = _project()
    dist = _dist(name, version)
    info = dist + ".dist-info/"
    files = dict(files)
    files[info + "METADATA"] = meta.encode("utf-8")
    files[info + "WHEEL"] = b"Wheel-Version: 1.0\nGenerator: wts_client _build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[info + "top_level.txt"] = (PACKAGE + "\n").encode()
    record = []
    for arc, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
    record.append(info + "RECORD,,")
    files[info + "RECORD"] = ("\n".join(record) + "\n").encode()
    filename = dist + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files.items():
            z.writestr(arc, data)
    return filename


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    for arc, path in _sources():
        with open(path, "rb") as f:
            files[arc] = f.read()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this folder on sys.path: edits take effect
    without reinstalling."""
    return _wheel(wheel_directory, {"__editable__.wts_client.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    name, version, meta = _project()
    dist = _dist(name, version)
    filename = dist + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", "_build/backend.py"] + [arc for arc, _ in _sources()]:
            t.add(os.path.join(ROOT, rel), arcname=dist + "/" + rel)
        data = meta.encode("utf-8")
        ti = tarfile.TarInfo(dist + "/PKG-INFO")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    return filename
