"""The process on this machine that listens on the TCP port a stub connection reached.

QEMU user mode's stub ignores the GDB interrupt while the guest runs; when
the stub runs here, a signal to its process stops the guest instead
(:mod:`liveunwind.targets.remote.gdbremote`).  The process is found as
``ss -ltnp`` finds it: the listening socket's inode in ``/proc/net/tcp`` and
``tcp6`` (this network namespace's), then the process holding a descriptor
``socket:[INODE]`` in ``/proc/*/fd``.  Every count is bounded and so is the
time the search may take: the answer is a pid, or why there is none.
"""

from __future__ import annotations

import ipaddress
import os
import time

from liveunwind.targets.files import read_kernel_file

#: Largest /proc/net/tcp{,6} read (150 bytes a socket: about 100,000 sockets).
_TABLE_LIMIT = 16 << 20
#: Most processes and descriptors looked at before giving up.
_MAX_PROCESSES = 1 << 16
_MAX_DESCRIPTORS = 1 << 20
#: The socket state of a listening socket in /proc/net/tcp.
_LISTEN = "0A"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def on_this_machine(local: str, peer: str) -> bool:
    """True when the connection's far end is this machine (loopback, or our own address)."""
    try:
        theirs = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(theirs, "ipv4_mapped", None)
    if mapped is not None:
        theirs = mapped
    return theirs.is_loopback or peer == local


def listening_owner(peer: str, port: int, *, seconds: float) -> tuple[int | None, str]:
    """The pid listening on ``peer``:``port`` here, or None and why not.

    Several processes sharing the socket (a forked listener) have no one
    owner: None, saying so.  Gives up after ``seconds``.
    """
    deadline = time.monotonic() + seconds
    inodes = _listening_inodes(ipaddress.ip_address(peer.split("%", 1)[0]), port)
    if not inodes:
        return None, f"no socket listening on port {port} is visible in /proc/net/tcp"
    owners = _holders({f"socket:[{inode}]" for inode in inodes}, deadline)
    if owners is None:
        return None, f"the owner of port {port} was not found within {seconds:g} s"
    if not owners:
        return None, f"no process visible here holds the socket listening on port {port}"
    if len(owners) > 1:
        pids = ", ".join(str(pid) for pid in sorted(owners))
        return None, f"processes {pids} share the socket listening on port {port}"
    return owners.pop(), ""


def _listening_inodes(peer: Address, port: int) -> set[int]:
    """Inodes of the sockets listening on ``port`` at ``peer`` or at every address."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            text = read_kernel_file(table, _TABLE_LIMIT).decode("ascii", "replace")
        except OSError:
            continue
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            address, _, port_hex = fields[1].partition(":")
            try:
                listening = _address(address)
                inode = int(fields[9])
                if int(port_hex, 16) != port or inode == 0:
                    continue
            except ValueError:
                continue
            if listening.is_unspecified or _same(listening, peer):
                inodes.add(inode)
    return inodes


def _address(text: str) -> Address:
    """An address as /proc/net/tcp{,6} prints it: 32-bit words in this machine's byte order."""
    raw = bytes.fromhex(text)
    if len(raw) not in (4, 16):
        raise ValueError(text)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _same(listening: Address, peer: Address) -> bool:
    """The listener's address is the peer's, one of them perhaps IPv4 mapped into IPv6."""
    unmapped = [getattr(a, "ipv4_mapped", None) or a for a in (listening, peer)]
    return unmapped[0] == unmapped[1]


def _holders(links: set[str], deadline: float) -> set[int] | None:
    """Pids with a descriptor linking to one of ``links``; None when the time ran out."""
    holders: set[int] = set()
    descriptors = 0
    try:
        processes = [entry.name for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return holders
    for name in processes[:_MAX_PROCESSES]:
        if time.monotonic() > deadline or descriptors > _MAX_DESCRIPTORS:
            return None
        folder = f"/proc/{name}/fd"
        try:
            entries = os.listdir(folder)
        except OSError:
            continue  # gone, or not ours to look at
        for fd in entries:
            descriptors += 1
            try:
                if os.readlink(f"{folder}/{fd}") in links:
                    holders.add(int(name))
                    break
            except OSError:
                continue
    return holders


#: Most threads of the stub's process looked at.
_MAX_THREADS = 1 << 16


def thread_activity(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread of ``pid``: its state letter and the CPU time (ticks) it has used."""
    activity: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")[:_MAX_THREADS]
    except OSError:
        return activity
    for tid in tids:
        try:
            stat = read_kernel_file(f"/proc/{pid}/task/{tid}/stat").decode("ascii", "replace")
            fields = stat.rsplit(")", 1)[1].split()
            activity[int(tid)] = (fields[0], int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            continue  # gone, or unreadable: nothing said about it
    return activity


def executable_name(pid: int) -> str:
    """The file name of ``pid``'s executable ("" when it cannot be read)."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""
