"""Creating and deleting a job from Python, through the coordinator; its token admits
the workers, a wrong one is refused."""

import os

import numpy as np
import pytest

import rackweave
from rwnode import running_node


@pytest.fixture(scope="module")
def cluster():
    """One rack-agg that embeds the coordinator, jobs by token only (no --open-jobs)."""
    with running_node("--name", "py0") as address:
        yield address


def test_a_job_created_from_python_admits_its_workers(cluster):
    job = rackweave.create_job(cluster, "from-python", workers=1, optimizer="sgd", lr=0.5)
    assert job["name"] == "from-python" and job["token"] and job["node"] == "py0"
    assert job["endpoints"] == [cluster]
    with pytest.raises(rackweave.Error) as e:
        rackweave.create_job(cluster, "from-python", workers=1)
    assert e.value.code == "duplicate_name"
    with pytest.raises(rackweave.Error) as e:
        rackweave.Worker(connect=cluster, job="from-python", rank=0, workers=1,
                         tensors={"w": 4}, optimizer="sgd", lr=0.5, token="wrong" * 8)
    assert e.value.code == "unauthorized"
    with rackweave.Worker(connect=job["endpoints"][0], job="from-python", rank=0, workers=1,
                          tensors={"w": 4}, optimizer="sgd", lr=0.5,
                          token=job["token"]) as w:
        out = np.empty(4, np.float32)
        w.push_pull("w", np.ones(4, np.float32), out).result()
        assert out.tolist() == [-0.5] * 4
    rackweave.delete_job(cluster, "from-python")
    with pytest.raises(rackweave.Error) as e:
        rackweave.delete_job(cluster, "from-python")
    assert e.value.code == "unknown_job"


def test_bad_job_requests(cluster):
    with pytest.raises(ValueError, match="unknown optimizer"):
        rackweave.create_job(cluster, "bad", workers=1, optimizer="nope")
    with pytest.raises(rackweave.Error) as e:
        rackweave.create_job(cluster, "bad", workers=0)
    assert e.value.code == "invalid_spec"
    with pytest.raises(rackweave.Error) as e:
        rackweave.create_job("127.0.0.1:1", "bad", workers=1, timeout=2)
    assert e.value.code == "unavailable"


def _secret(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text + "\n")
    os.chmod(path, 0o600)
    return path


def test_a_tenant_creates_and_deletes_its_own_jobs_only(tmp_path):
    d = str(tmp_path)
    cluster_secret = _secret(d, "cluster.secret", "the-cluster-secret-0123456789")
    vision = _secret(d, "vision.secret", "vision-team-secret-0123456789")
    speech = _secret(d, "speech.secret", "speech-team-secret-0123456789")
    tenants = os.path.join(d, "tenants.toml")
    with open(tenants, "w") as f:
        f.write("[vision]\nsecret_file = 'vision.secret'\nmax_memory_mib = 16\n"
                "[speech]\nsecret_file = 'speech.secret'\n")
    with running_node("--name", "pyt", "--cluster-secret-file", cluster_secret,
                      "--tenants-file", tenants) as address:
        with pytest.raises(rackweave.Error) as e:  # its quota wants a memory reservation
            rackweave.create_job(address, "m", workers=1, tenant="vision", secret_file=vision)
        assert e.value.code == "invalid_spec" and "memory" in str(e.value)
        job = rackweave.create_job(address, "m", workers=1, tenant="vision",
                                   secret_file=vision, memory=8 << 20)
        assert job["name"] == "vision:m" and job["memory"] == 8 << 20
        with pytest.raises(rackweave.Error) as e:  # another tenant does not see it
            rackweave.delete_job(address, "vision:m", tenant="speech", secret_file=speech)
        assert e.value.code == "unknown_job"
        with pytest.raises(rackweave.Error) as e:  # a wrong secret is not admitted
            rackweave.create_job(address, "x", workers=1, tenant="speech", secret_file=vision)
        assert e.value.code == "unauthorized"
        with pytest.raises(ValueError, match="secret_file"):
            rackweave.create_job(address, "x", workers=1, tenant="speech")
        rackweave.delete_job(address, "m", tenant="vision", secret_file=vision)
        with pytest.raises(rackweave.Error) as e:
            rackweave.delete_job(address, "vision:m", secret_file=cluster_secret)
        assert e.value.code == "unknown_job"
