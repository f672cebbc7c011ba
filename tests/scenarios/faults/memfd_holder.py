#!/usr/bin/env python3
"""A local process that shares its memory with a conduit-agent, as a training process would.

    memfd_holder.py SOCKET NAME BYTES

Creates a memfd of BYTES, maps it shared, hands it to the agent over its import socket (one line of JSON
{"name", "bytes"} with the fd attached by SCM_RIGHTS) so it becomes region NAME, prints "imported NAME", and
keeps the mapping while it reads commands from stdin, one per line:

    flip OFFSET     XOR the byte at OFFSET with 0xff; prints "flipped OFFSET OLD NEW" (hex)
    peek OFFSET     prints "byte OFFSET VALUE" (hex)

It exits at end of input. The agent maps the same pages: a flip here is a flip in the region.
"""
import json
import mmap
import os
import socket
import sys


def main() -> int:
    path, name, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    mem = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        socket.send_fds(s, [(json.dumps({"name": name, "bytes": size}) + "\n").encode()], [fd])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    os.close(fd)  # the mapping (and the agent's copy of the fd) keep the memory
    answer = json.loads(reply or b"{}")
    if answer.get("ok") is not True:
        print(f"import failed: {answer}", flush=True)
        return 1
    print(f"imported {name}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) == 2 and words[0] == "flip":
            at = int(words[1])
            old = mem[at]
            mem[at] = old ^ 0xFF
            print(f"flipped {at} {old:02x} {mem[at]:02x}", flush=True)
        elif len(words) == 2 and words[0] == "peek":
            at = int(words[1])
            print(f"byte {at} {mem[at]:02x}", flush=True)
        else:
            print(f"unknown command: {line.strip()}", flush=True)
    mem.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
