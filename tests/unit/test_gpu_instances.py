"""The one GPU table: complete for the families the platform promises, and self-consistent."""

from __future__ import annotations

import pytest

from stacks.gpu_instances import gpu_instance_types, lookup

REQUIRED_FAMILIES = {"g4dn", "g5", "g6", "g6e", "p3", "p4d", "p5"}


def test_required_families_are_present():
    assert REQUIRED_FAMILIES <= {row.family for row in gpu_instance_types().values()}


@pytest.mark.parametrize("name", sorted(gpu_instance_types()))
def test_rows_are_plausible(name):
    row = gpu_instance_types()[name]
    assert row.gpu_model.startswith("NVIDIA ")
    assert row.gpu_count in (1, 2, 4, 8)
    assert row.gpu_memory_gib >= 16 and row.vcpus >= 4 and row.vcpus % row.gpu_count == 0
    assert row.mixed_precision_dtype in ("bfloat16", "float16")
    assert row.peak_tflops_half > 0 and row.on_demand_usd_per_hour > 0


def test_known_facts():
    assert (lookup("g5.12xlarge").gpu_count, lookup("g5.12xlarge").gpu_model) == (4, "NVIDIA A10G")
    assert lookup("ml.p4d.24xlarge").gpu_count == 8 and lookup("p4d.24xlarge").efa
    assert lookup("p5.48xlarge").gpu_model == "NVIDIA H100" and lookup("p5.48xlarge").efa
    assert not lookup("g5.xlarge").efa and lookup("g5.xlarge").local_nvme_gb > 0
    assert lookup("p3.2xlarge").local_nvme_gb == 0
    assert lookup("g4dn.xlarge").mixed_precision_dtype == "float16"  # Turing has no bf16
    assert lookup("m5.large") is None


def test_every_multi_gpu_type_has_an_all_reduce_floor_below_its_link_and_one_gpu_types_none():
    nvlink_one_way = {"NVIDIA V100": 150.0, "NVIDIA A100": 300.0, "NVIDIA H100": 450.0, "NVIDIA H200": 450.0}
    for name, row in gpu_instance_types().items():
        if row.gpu_count == 1:
            assert row.allreduce_busbw_floor_gbps is None, name
            continue
        floor = row.allreduce_busbw_floor_gbps
        assert floor is not None and floor > 0, name
        # A floor, not an expectation: at most half of the data-sheet link, which busBw is measured against.
        assert floor <= 0.5 * nvlink_one_way.get(row.gpu_model, 31.5), name
    assert lookup("p5.48xlarge").allreduce_busbw_floor_gbps > lookup("p4d.24xlarge").allreduce_busbw_floor_gbps
    assert lookup("p4d.24xlarge").allreduce_busbw_floor_gbps > lookup("g5.48xlarge").allreduce_busbw_floor_gbps


def test_quota_family_matches_ec2_quota_buckets():
    assert lookup("g6e.xlarge").quota_family == "G" and lookup("p5.48xlarge").quota_family == "P"


def test_efa_interface_counts_are_one_per_network_card_and_agree_with_the_efa_flag():
    # EC2 DescribeInstanceTypes NetworkInfo.EfaInfo.MaximumEfaInterfaces (the table's _columns says where from).
    expected = {"p4d.24xlarge": 4, "p4de.24xlarge": 4, "p5.48xlarge": 32, "p5e.48xlarge": 32,
                "g6e.24xlarge": 2, "g6e.48xlarge": 4, "p3dn.24xlarge": 1, "g5.12xlarge": 1, "g5.xlarge": 0}
    assert {name: lookup(name).efa_interfaces for name in expected} == expected
    for name, row in gpu_instance_types().items():
        assert row.efa == (row.efa_interfaces > 0), name


def test_the_image_reads_the_same_efa_counts():
    from trainer import gpu_table

    for name, row in gpu_instance_types().items():
        assert gpu_table.lookup(name).efa_interfaces == row.efa_interfaces, name
