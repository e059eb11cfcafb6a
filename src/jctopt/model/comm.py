"""Collectives under the alpha-beta (Hockney) model, placed on NVLink or the scale-out fabric.

Every time is in seconds, every message size ``nbytes`` is the per-GPU buffer in bytes (the
nccl-tests "size"), bandwidths are bytes/s. A group of ``size`` ranks with rank ``stride``
(Megatron order: tp innermost, then cp, dp, pp) has ``n_local`` members inside one NVLink
domain and spans ``n_domains`` domains.
"""

from __future__ import annotations

import jax.numpy as jnp

from .types import ClusterSpec, FabricSpec, GPUSpec

_US = 1e-6
LL_BW_FRACTION = 0.5


def placement(size, stride, domain):
    """(members per NVLink domain, domains spanned) of a group of ``size`` ranks."""
    n_local = jnp.clip(domain / stride, 1.0, size)
    return n_local, size / n_local


def nvlink_bw(g: GPUSpec):
    """Ring bus bandwidth inside the domain, bytes/s (nvlink_eff fitted to nccl-tests)."""
    return 1e9 * g.nvlink_gbps * g.nvlink_eff


def nic_bw(f: FabricSpec, c: ClusterSpec):
    """Scale-out bytes/s available to one GPU: its share of the node's NICs, at the
    achieved fraction of line rate; TCP adds a host copy in series (no GPUDirect RDMA)."""
    wire = 1e9 * f.nic_gbit / 8.0 * f.nic_eff * c.nics_per_node / c.gpus_per_node
    tcp = 1.0 / (1.0 / wire + 1.0 / (1e9 * f.host_copy_gbps))
    return jnp.where(f.rdma > 0, wire, tcp)


def leaf_nodes(c: ClusterSpec):
    """Nodes under one leaf (rail) switch: half the ports face down. A rail-optimized leaf
    takes one NIC from each node; a fat-tree ToR takes all NICs of a node."""
    down = c.switch_radix / 2.0
    return jnp.where(c.rail_optimized > 0, down, down / c.nics_per_node)


def scale_out_bw(size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """Per-GPU fabric bandwidth for a group; divided by the oversubscription when the
    group's rank range covers more nodes than one leaf holds (traffic crosses the spine)."""
    span_nodes = size * stride / c.gpus_per_node
    crosses_spine = span_nodes > leaf_nodes(c)
    return nic_bw(f, c) / jnp.where(crosses_spine, c.oversubscription, 1.0)


def _ring_path(size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """(n_local, n_domains, beta, latency of one pass) of a ring over the group.

    beta is the slowest hop: NVLink inside a domain; once the ring leaves the domain,
    min(NVLink, n_local x NIC) (each node's rings share its NICs). Of the n steps of a
    pass, n_domains cross the fabric and the rest stay on NVLink.
    """
    n_local, n_dom = placement(size, stride, g.nvlink_domain)
    b_nv = nvlink_bw(g)
    multi = n_dom > 1.0
    beta = jnp.where(multi, jnp.minimum(b_nv, n_local * scale_out_bw(size, stride, g, f, c)), b_nv)
    latency = jnp.where(multi, (size - n_dom) * g.nvlink_latency_us + n_dom * f.latency_us,
                        (size - 1.0) * g.nvlink_latency_us) * _US
    return n_local, n_dom, beta, latency


def all_reduce(nbytes, size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """Fastest all-reduce over the algorithms NCCL chooses from, like its tuner does.

    ring:  T = 2(n-1)(alpha + N/(n beta)) (Hockney; Thakur et al. 2005), beta the slowest
           hop (see _ring_path); inside a domain, the faster of NCCL's Simple and LL protocols.
    tree:  double binary tree across domains, 2 log2(domains) alpha latency, 2 N / beta.
    NVLS:  NVLink SHARP inside one domain: the switch reduces, bytes on the wire halve.
    SHARP: hierarchical with in-network reduction across domains: reduce-scatter in the
           domain, N/n_local sent once across the fabric (half a ring's), all-gather.
    """
    n = size
    n_local, n_dom, beta, ring_latency = _ring_path(size, stride, g, f, c)
    a_nv, a_net = g.nvlink_latency_us * _US, f.latency_us * _US
    b_nv, b_net = nvlink_bw(g), scale_out_bw(size, stride, g, f, c)
    multi = n_dom > 1.0
    ring = 2.0 * ring_latency + 2.0 * (n - 1.0) / n * nbytes / beta
    # LL protocol inside a domain: each 8-byte store carries a 4-byte flag, so half the
    # bandwidth at a much lower per-step latency (NCCL docs, NCCL_PROTO); wins below ~10 MB.
    ll = 2.0 * (n - 1.0) * (g.ll_latency_us * _US + nbytes / (n * LL_BW_FRACTION * b_nv))
    ring = jnp.where(multi, ring, jnp.minimum(ring, ll))

    tree_latency = 2.0 * (jnp.log2(jnp.maximum(n_dom, 1.0)) * a_net + (n_local - 1.0) * a_nv)
    tree = jnp.where(multi, tree_latency + 2.0 * nbytes / beta, jnp.inf)

    has_nvls = (g.nvls > 0) & (g.nvls_eff > 0)
    # Safe stand-in where there is no NVLS (nvls_eff = 0), so gradients stay finite.
    b_nvls = 2.0 * 1e9 * g.nvlink_gbps * jnp.where(has_nvls, g.nvls_eff, 1.0)
    nvls_time = 2.0 * (n - 1.0) * a_nv + 2.0 * (n - 1.0) / n * nbytes / b_nvls
    nvls = jnp.where(has_nvls & ~multi & (n > 1.0), nvls_time, jnp.inf)

    # The intra-domain reduce-scatter/all-gather and the network phase pipeline (chunked),
    # so the slower of the two sets the bandwidth term.
    intra_latency = 2.0 * (n_local - 1.0) * a_nv
    intra_bw = 2.0 * (n_local - 1.0) / n_local * nbytes / b_nv
    sharp_time = intra_latency + 4.0 * a_net + jnp.maximum(intra_bw, nbytes / (n_local * b_net))
    sharp = jnp.where((f.sharp > 0) & multi, sharp_time, jnp.inf)
    return jnp.minimum(jnp.minimum(ring, tree), jnp.minimum(nvls, sharp))


def all_gather(nbytes, size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """Ring all-gather (or reduce-scatter) of an ``nbytes`` result: (n-1)(alpha + N/(n beta)),
    half of the ring all-reduce (Thakur et al. 2005)."""
    _, _, beta, latency = _ring_path(size, stride, g, f, c)
    return latency + (size - 1.0) / size * nbytes / beta


def one_step_latency(over_nvlink, over_fabric, g: GPUSpec, f: FabricSpec):
    """Latency (s) of an all-to-all: every peer's share is posted at once (NCCL's grouped
    send/receive, one DeepEP/HybridEP kernel), so it pays one step's alpha on each level it
    crosses, not the n - 1 steps of a ring."""
    return _US * (jnp.where(over_nvlink, g.nvlink_latency_us, 0.0) + jnp.where(over_fabric, f.latency_us, 0.0))


def all_to_all(nbytes, size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """All-to-all of ``nbytes`` per GPU: (n-1)/n of it leaves the GPU, the part bound for
    other domains over the fabric and the rest over NVLink, both at once."""
    n = size
    n_local, _ = placement(size, stride, g.nvlink_domain)
    intra = (n_local - 1.0) / n * nbytes / nvlink_bw(g)
    inter = (n - n_local) / n * nbytes / scale_out_bw(size, stride, g, f, c)
    return one_step_latency(n_local > 1.0, n > n_local, g, f) + jnp.maximum(intra, inter)


def all_to_all_two_hop(nbytes, top_k, size, stride, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """Hierarchical MoE dispatch (or combine) of ``top_k`` copies of an ``nbytes`` token
    buffer per GPU: DeepEP's internode kernels and HybridEP send a token over the fabric once
    per remote NVLink domain holding one of its experts, to the GPU of the same local rank,
    which forwards it over NVLink (DeepSeek-V3 report, arXiv:2412.19437, Sec. 3.2.2). With k
    experts drawn uniformly over d domains a token reaches (d - 1)(1 - (1 - 1/d)^k) remote
    domains on average; the flat all-to-all sends k (n - n_local)/n copies. Inside one domain
    the two are the same."""
    n = size
    n_local, n_dom = placement(size, stride, g.nvlink_domain)
    remote_domains = (n_dom - 1.0) * (1.0 - (1.0 - 1.0 / n_dom) ** top_k)
    inter = remote_domains * nbytes / scale_out_bw(size, stride, g, f, c)
    # NVLink: copies for the other GPUs of the own domain, and forwarding those that arrive.
    nvlink_copies = top_k * ((n_local - 1.0) / n + (n - n_local) / n * (n_local - 1.0) / n_local)
    intra = nvlink_copies * nbytes / nvlink_bw(g)
    return one_step_latency(n_local > 1.0, n_dom > 1.0, g, f) + jnp.maximum(intra, inter)


def p2p(nbytes, crosses_domain, g: GPUSpec, f: FabricSpec, c: ClusterSpec):
    """One point-to-point send (pipeline stage boundary)."""
    net = f.latency_us * _US + nbytes / nic_bw(f, c)
    local = g.nvlink_latency_us * _US + nbytes / nvlink_bw(g)
    return jnp.where(crosses_domain, net, local)


def bus_bandwidth(time_s, nbytes, size):
    """nccl-tests all-reduce convention: busbw = algbw * 2(n-1)/n, bytes/s."""
    return nbytes / time_s * 2.0 * (size - 1.0) / size
