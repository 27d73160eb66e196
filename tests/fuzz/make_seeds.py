#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (corpus/<target>/): small valid inputs and edge cases
that every target must handle today. Inputs that crash a target are not seeds: they belong in a
regression test beside the fix. Run from anywhere; it rewrites corpus/ in place."""
import gzip
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "corpus")


def write(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


MINIMAL = """apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: tiny
spec:
  replicas: 1
"""


def manifest():
    for f in sorted(os.listdir(os.path.join(ROOT, "manifests/examples"))):
        with open(os.path.join(ROOT, "manifests/examples", f), "rb") as src:
            write("manifest", "example-" + f, src.read())
    write("manifest", "minimal.yaml", MINIMAL)
    write("manifest", "flow.yaml",
          '{"apiVersion": "ringtrain.dev/v1alpha1", "kind": "TrainingJob", '
          '"metadata": {"name": "j", "namespace": "ns"}, "spec": {"replicas": 3, '
          '"train": {"model": "cnn", "epochs": 1}, "runPolicy": {"suspend": true}}, '
          '"status": {"phase": "Running", "restarts": 2, "progress": {"step": 10}}}')
    write("manifest", "flow-objects.yaml",
          '{"apiVersion": "ringtrain.dev/v1alpha1", "kind": "TrainingJob", '
          '"metadata": {"name": "j"}, "spec": {"train": {"model": {"layers": ['
          '{"conv2d": {"filters": 4, "kernel": 3, "padding": "same"}}, "relu", '
          '{"max_pool2d": {"pool": 2}}, "flatten", {"dropout": {"rate": 0.5}}, '
          '{"dense": {"units": 3}}, "softmax"], "loss": "softmax_cross_entropy"}, '
          '"dataset": {"format": "npy", "trainX": "/x.npy", "trainY": "/y.npy", '
          '"testX": "/tx.npy", "testY": "/ty.npy", "inputShape": [1, 8, 8], "classes": 3}}}, '
          '"status": {"phase": "Failed"}}')
    write("manifest", "anchor.yaml", MINIMAL + "  train: &t\n    epochs: 2\n  checkpoint:\n"
          "    everySteps: 5\n    path: /ckpt\n")
    write("manifest", "bad-replicas.yaml", MINIMAL.replace("replicas: 1", "replicas: 0"))
    write("manifest", "wrong-kind.yaml", MINIMAL.replace("TrainingJob", "Deployment"))
    write("manifest", "string-replicas.yaml", MINIMAL.replace("replicas: 1", "replicas: two"))
    write("manifest", "empty.yaml", "")
    write("manifest", "not-a-map.yaml", "- a\n- b\n")
    write("manifest", "command.yaml", MINIMAL + "  command: [python3, -c, 'print(1)']\n"
          "  template:\n    spec:\n      nodeSelector: {gpu: 'yes'}\n")


def frame(payload):
    return struct.pack(">I", len(payload)) + payload


def s(b):
    return struct.pack(">I", len(b)) + b


def u64(v):
    return struct.pack(">Q", v & 0xFFFFFFFFFFFFFFFF)


def store():
    SET, GET, ADD, CAS, WAIT = 1, 2, 3, 4, 5
    write("store", "set-get", b"\x00" + frame(bytes([SET]) + s(b"k") + s(b"v")) +
          frame(bytes([GET]) + s(b"k") + u64(1000)))
    write("store", "add", b"\x00" + frame(bytes([ADD]) + s(b"n") + u64(5)) +
          frame(bytes([ADD]) + s(b"n") + u64(-2)))
    write("store", "compare-set", b"\x00" + frame(bytes([CAS]) + s(b"c") + s(b"") + s(b"x")) +
          frame(bytes([CAS]) + s(b"c") + s(b"wrong") + s(b"y")))
    write("store", "wait", b"\x00" + frame(bytes([SET]) + s(b"a") + s(b"1")) +
          frame(bytes([WAIT]) + struct.pack(">I", 2) + s(b"a") + s(b"b") + u64(0)))
    write("store", "get-missing-timeout0", b"\x00" + frame(bytes([GET]) + s(b"nope") + u64(0)))
    write("store", "add-non-integer", b"\x00" + frame(bytes([SET]) + s(b"t") + s(b"abc")) +
          frame(bytes([ADD]) + s(b"t") + u64(1)))
    write("store", "unknown-op", b"\x00" + frame(b"\x09"))
    write("store", "empty-request", b"\x00" + frame(b""))
    write("store", "short-set", b"\x00" + frame(bytes([SET]) + struct.pack(">I", 100) + b"k"))
    write("store", "huge-frame-length", b"\x00" + struct.pack(">I", 0xFFFFFFFF) + b"x")
    write("store", "wrong-token", b"\x01" + frame(b"\x00" * 32))
    write("store", "bad-auth-length", b"\x01" + frame(b"\x00" * 5))


def idx_file(magic, dims, payload):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload


def idx_input(flags, images, labels):
    return bytes([flags]) + struct.pack(">H", len(images)) + images + labels


def idx():
    images = idx_file(0x803, [2, 2, 3], bytes(range(12)))
    labels = idx_file(0x801, [2], bytes([1, 9]))
    for flags in range(4):
        write("idx", f"valid-flags{flags}", idx_input(flags, images, labels))
    write("idx", "zero-count", idx_input(0, idx_file(0x803, [0, 28, 28], b""),
                                         idx_file(0x801, [0], b"")))
    write("idx", "truncated-images", idx_input(0, images[:-3], labels))
    write("idx", "count-mismatch", idx_input(0, images, idx_file(0x801, [3], bytes([1, 2, 3]))))
    write("idx", "label-out-of-range", idx_input(0, images, idx_file(0x801, [2], bytes([1, 10]))))
    write("idx", "wrong-magic", idx_input(0, labels, images))
    write("idx", "trailing-bytes", idx_input(0, images + b"\x00", labels))



def csv_input(flags, opts, first, second):
    first, second = first.encode(), second.encode()
    return bytes([flags, opts]) + struct.pack(">H", len(first)) + first + second


def csv():
    # opts: bits 0-1 header mode (auto, none, header, counts), 2-4 delimiter (auto , ; tab ' '),
    # 5-7 label column (index - 3, or 7: the column named "y"); label -1 is 2 << 5.
    last = 2 << 5
    train = "1,2,0\n3,4,1\n5,6,2\n"
    write("csv", "split-flags0", csv_input(0, last, train, "7,8,1\n"))
    write("csv", "split-gzip-standardise", csv_input(1 | 2 | 16, last, train, "7,8,1\n"))
    write("csv", "header-by-name", csv_input(0, 7 << 5, "a,y,b\n1,0,2\n3,1,4\n", "a,y,b\n5,1,6\n"))
    write("csv", "counts-iris", csv_input(0, last, "3,2,setosa,versicolor,virginica\n1,2,0\n"
                                          "3,4,2\n5,6,1\n", "1,2,1\n"))
    write("csv", "counts-boston", csv_input(8, 7 << 5, '2,1,,\n"A","y"\n1,24\n3,21.6\n',
                                            '"A","y"\n2,22\n'))
    write("csv", "whitespace-targets", csv_input(4 | 8, 4 << 2, "59 2 32.1\n48  1\t21.6\n",
                                                 "Weight Waist\n191 36\n189 37\n"))
    write("csv", "label-first-semicolon", csv_input(0, (2 << 2) | (3 << 5), "0;1.5;2\n1;3;4\n",
                                                    "1;5;6\n"))
    write("csv", "quoted-tab", csv_input(0, (3 << 2) | last, '"a\tb"\t"y"\n1\t0\n', "2\t0\n"))
    write("csv", "non-numeric", csv_input(0, last, "1,x,0\n", "1,2,0\n"))
    write("csv", "ragged", csv_input(0, last, "1,2,0\n1,0\n", "1,2,0\n"))
    write("csv", "not-integer-label", csv_input(0, last, "1,2,0.5\n", "1,2,0\n"))
    write("csv", "counts-mismatch", csv_input(0, 3 | last, "9,2,a,b\n1,2,0\n", "1,2,0\n"))
    write("csv", "nan-and-exponent", csv_input(8, last, "nan,1e39,1\n-0,+1e-3,2\n", "1,2,3\n"))
    write("csv", "crlf-blank-lines", csv_input(0, last, "1,2,0\r\n\r\n3,4,1\r\n", ""))
    write("csv", "empty", csv_input(0, 0, "", ""))


def npy_file(descr, shape, payload, version=1, fortran="False"):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, shape)
    pre = 10 if version == 1 else 12
    d += " " * ((64 - (pre + len(d) + 1) % 64) % 64) + "\n"
    length = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + length + d.encode() + payload


def npy_input(flags, x, y):
    return bytes([flags]) + struct.pack(">H", len(x)) + x + y


def npy():
    y = npy_file("<i8", "(2,)", struct.pack("<2q", 0, 2))
    x8 = npy_file("|u1", "(2, 2, 3)", bytes(range(0, 240, 20)))
    for flags in range(4):
        write("npy", f"uint8-flags{flags}", npy_input(flags, x8, y))
    xf = npy_file("<f4", "(2, 2)", struct.pack("<4f", 1, 2, 3, 4), version=2)
    write("npy", "float32-v2-standardise", npy_input(8, xf, y))
    write("npy", "float64-v3-regression",
          npy_input(4, npy_file("<f8", "(2,)", struct.pack("<2d", 1, 2), version=3),
                    npy_file("<f4", "(2, 2)", struct.pack("<4f", 0.5, 1, 2, 3))))
    write("npy", "int32-labels", npy_input(16, xf, npy_file("<i4", "(2, 1)", struct.pack("<2i", 9, 1))))
    write("npy", "fortran", npy_input(0, npy_file("<f4", "(2, 2)", struct.pack("<4f", 1, 2, 3, 4),
                                                  fortran="True"), y))
    write("npy", "big-endian", npy_input(0, npy_file(">f4", "(2,)", struct.pack(">2f", 1, 2)), y))
    write("npy", "huge-shape", npy_input(0, npy_file("|u1", "(1000000, 1000000)", b"tiny"), y))
    write("npy", "lying-shape", npy_input(1, npy_file("<f4", "(1000000, 100)", b"tiny"), y))
    write("npy", "truncated", npy_input(0, x8[:-3], y))
    write("npy", "label-count", npy_input(0, x8, npy_file("<i8", "(3,)", struct.pack("<3q", 0, 1, 1))))
    write("npy", "negative-label", npy_input(0, x8, npy_file("<i8", "(2,)", struct.pack("<2q", 0, -1))))
    write("npy", "float-labels", npy_input(0, x8, npy_file("<f4", "(2,)", struct.pack("<2f", 0, 1))))
    write("npy", "nan-feature", npy_input(0, npy_file("<f4", "(2,)", struct.pack("<2f", 1, float("nan"))), y))
    write("npy", "bad-dict", npy_input(0, npy_file("<f4", "(2,", struct.pack("<2f", 1, 2)), y))
    write("npy", "bad-magic", npy_input(0, b"\x93NUMPX\x01\x00\x00\x00", y))


HEADER = struct.Struct("<8sqqqqqiI")  # runner/train/checkpoint.cc's HeaderV1: 56 bytes
HEADER_V2 = struct.Struct("<8sqqqqqiiqII")  # HeaderV2: 72 bytes (world size, epoch samples)


def ckpt(step, params, state, fix_crc=True, epoch=1):
    body = b"".join(struct.pack("<f", x) for x in params) + \
        b"".join(struct.pack("<f", x) for x in state)
    h = HEADER.pack(b"RTCKPT01", step, 2, step, len(params), len(state), epoch, 0)
    crc = zlib.crc32(h + body) & 0xFFFFFFFF if fix_crc else 0xDEADBEEF
    return HEADER.pack(b"RTCKPT01", step, 2, step, len(params), len(state), epoch, crc) + body


def ckpt_v2(step, params, state, world=2, epoch_samples=64, epoch=1):
    body = b"".join(struct.pack("<f", x) for x in params) + \
        b"".join(struct.pack("<f", x) for x in state)
    fields = (b"RTCKPT02", step, 2, step, len(params), len(state), epoch, world, epoch_samples)
    crc = zlib.crc32(HEADER_V2.pack(*fields, 0, 0) + body) & 0xFFFFFFFF
    return HEADER_V2.pack(*fields, crc, 0) + body


def ckpt_v3(step, params, state, record=b"input=2;dense(units=2);relu;loss=softmax_cross_entropy\n2",
            model_bytes=None):
    """HeaderV2's layout with magic RTCKPT03, its last field the model record's length."""
    body = b"".join(struct.pack("<f", x) for x in params) + \
        b"".join(struct.pack("<f", x) for x in state)
    n = len(record) if model_bytes is None else model_bytes
    fields = (b"RTCKPT03", step, 2, step, len(params), len(state), 1, 2, 64)
    crc = zlib.crc32(HEADER_V2.pack(*fields, 0, n) + record + body) & 0xFFFFFFFF
    return HEADER_V2.pack(*fields, crc, n) + record + body


def checkpoint():
    good_v3 = ckpt_v3(9, [0.1 * i for i in range(6)], [0.01 * i for i in range(12)])
    write("checkpoint", "valid-v3", b"\x00" + good_v3)
    write("checkpoint", "v3-other-architecture",
          b"\x01" + ckpt_v3(9, [1.0] * 6, [2.0] * 12, record=b"input=2;dense(units=2);tanh\n2"))
    write("checkpoint", "v3-record-without-newline",
          b"\x01" + ckpt_v3(9, [1.0] * 6, [2.0] * 12, record=b"input=2"))
    write("checkpoint", "v3-huge-record",
          b"\x01" + ckpt_v3(9, [1.0] * 6, [2.0] * 12, model_bytes=0xFFFFFFF0))
    good_v2 = ckpt_v2(9, [0.1 * i for i in range(6)], [0.01 * i for i in range(12)])
    write("checkpoint", "valid-v2", b"\x00" + good_v2)
    write("checkpoint", "v2-huge-epoch-samples",
          b"\x01" + ckpt_v2(9, [1.0] * 6, [2.0] * 12, epoch_samples=2**62))
    write("checkpoint", "v2-negative-world", b"\x01" + ckpt_v2(9, [1.0] * 6, [2.0] * 12, world=-3))
    good = ckpt(9, [0.1 * i for i in range(6)], [0.01 * i for i in range(12)])
    write("checkpoint", "valid", b"\x00" + good)
    write("checkpoint", "valid-fixcrc", b"\x01" + good)
    write("checkpoint", "bad-crc", b"\x00" + ckpt(9, [1.0] * 6, [2.0] * 12, fix_crc=False))
    write("checkpoint", "truncated", b"\x00" + good[:70])
    write("checkpoint", "header-only", b"\x00" + good[:56])
    write("checkpoint", "wrong-magic", b"\x00" + b"XXXXXXXX" + good[8:])
    write("checkpoint", "other-model-sizes", b"\x00" + ckpt(9, [1.0] * 3, [2.0] * 6))
    write("checkpoint", "empty", b"\x00")


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: c
  cluster:
    server: http://127.0.0.1:6443
contexts:
- name: dev
  context:
    cluster: c
    user: u
    namespace: training
users:
- name: u
  user:
    token: abc.def
"""


def kubeconfig():
    write("kubeconfig", "token", KUBECONFIG)
    write("kubeconfig", "insecure-https", KUBECONFIG.replace("http://", "https://").replace(
        "    server:", "    insecure-skip-tls-verify: true\n    server:"))
    write("kubeconfig", "cert-data", KUBECONFIG.replace("    token: abc.def\n",
          "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
          "    client-key-data: LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCg==\n"))
    write("kubeconfig", "no-current-context", KUBECONFIG.replace("current-context: dev\n", ""))
    write("kubeconfig", "unknown-context", KUBECONFIG.replace("current-context: dev",
                                                              "current-context: prod"))
    write("kubeconfig", "no-server", KUBECONFIG.replace("    server: http://127.0.0.1:6443\n",
                                                        "    x: 1\n"))
    write("kubeconfig", "empty", "")
    write("kubeconfig", "json", '{"apiVersion":"v1","kind":"Config","current-context":"d",'
          '"clusters":[{"name":"c","cluster":{"server":"http://127.0.0.1:1"}}],'
          '"contexts":[{"name":"d","context":{"cluster":"c","user":"u"}}],'
          '"users":[{"name":"u","user":{}}]}')


def http():
    write("http", "status", "GET /status HTTP/1.1\r\nHost: rank0:9400\r\n\r\n")
    write("http", "metrics", "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
    write("http", "healthz-http10", "GET /healthz HTTP/1.0\r\n\r\n")
    write("http", "not-found", "GET /nope?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    write("http", "post", "POST /status HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd")
    write("http", "lf-only", "GET /status HTTP/1.1\nHost: x\n\n")
    write("http", "no-end-of-headers", "GET /status HTTP/1.1\r\nHost: x\r\n")
    write("http", "long-header", "GET /status HTTP/1.1\r\nX: " + "a" * 3000 + "\r\n\r\n")
    write("http", "garbage", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")
    write("http", "empty", "")


def status():
    body = ('{"job":"j","namespace":"default","rank":0,"attempt":1,"world_size":2,'
            '"state":"running","epoch":3,"step":1200,"steps_total":9000,'
            '"samples_per_second":15000.5,"loss":0.42,"message":"","test_accuracy":0.88}\n')
    write("status", "runner-status", b"\x00" + body.encode())
    write("status", "empty-object", b"\x00{}")
    write("status", "wrong-types", b'\x00{"step":"12","epoch":[1],"loss":null}')
    write("status", "huge-numbers", b'\x00{"step":1e400,"epoch":99999999999,"loss":-1e308}')
    write("status", "not-json", b"\x00<html>hi</html>")
    write("status", "array", b"\x00[1,2,3]")
    write("status", "raw-500", b"\x01HTTP/1.1 500 Internal Server Error\r\n"
          b"Content-Length: 2\r\n\r\nno")
    write("status", "raw-chunked", b"\x01HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          b"5\r\n{\"ste\r\n8\r\np\":7}\r\n\r\n0\r\n\r\n")
    write("status", "raw-no-length", b'\x01HTTP/1.1 200 OK\r\n\r\n{"step":5}')
    write("status", "raw-short-body", b'\x01HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}')
    write("status", "raw-garbage", b"\x01\x00\xff\r\n\r\n")


if __name__ == "__main__":
    shutil.rmtree(OUT, ignore_errors=True)
    for f in (manifest, store, idx, csv, npy, checkpoint, kubeconfig, http, status):
        f()
