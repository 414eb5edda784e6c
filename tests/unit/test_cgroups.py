"""The container ids /proc/PID/cgroup texts name, as each runtime writes its cgroups.

The texts are the forms the runtimes document (docker's cgroupfs and
systemd drivers, podman, containerd under Kubernetes); what a real
container's and a real cgroup's processes are is system/test_containers.py
and system/test_cgroups.py.
"""

from __future__ import annotations

from liveunwind.targets.live.cgroups import named_containers

ID = "90b6dd8f4176b5930d070c43fe9afcc039eb1c218b23925d267fcebde091a09a"
OTHER = "0123456789abcdef" * 4


def test_docker_cgroupfs_in_every_hierarchy_and_below_it() -> None:
    text = f"12:pids:/docker/{ID}\n0::/docker/{ID}/init.scope\n"
    assert named_containers(text) == {ID: f"/docker/{ID}"}


def test_systemd_scopes_of_docker_podman_and_containerd() -> None:
    for scope in (f"docker-{ID}.scope", f"libpod-{ID}.scope", f"cri-containerd-{ID}.scope"):
        text = f"0::/system.slice/{scope}\n"
        assert named_containers(text) == {ID: f"/system.slice/{scope}"}, scope


def test_kubernetes_pod_uid_is_not_a_container_id() -> None:
    """A pod's uid ends in 12 hex digits, a container id is 64: only the latter is taken."""
    pod = "pod1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    text = f"0::/kubepods/besteffort/{pod}/{OTHER}\n"
    assert named_containers(text) == {OTHER: f"/kubepods/besteffort/{pod}/{OTHER}"}


def test_nothing_named_outside_containers() -> None:
    assert named_containers("0::/\n") == {}
    assert named_containers("0::/user.slice/user-0.slice/session-3.scope\n") == {}
    assert named_containers(f"0::/docker/{ID[:63]}\n") == {}
    assert named_containers(f"0::/docker/{ID}x\n") == {}
