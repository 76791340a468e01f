"""Where the GPUs of a job sit and how fast they talk: GPUs per node on the SKU's own link
(NVLink/NVSwitch, or PCIe), nodes joined by InfiniBand, RoCE or Ethernet at a stated rate per GPU,
and the time NCCL takes for a collective over a group of them.

The collective model is NCCL's own tuning model (``src/graph/tuning.cc``, NVIDIA/nccl): a
collective of ``S`` bytes over ``n`` ranks takes ``latency + S x factor / (bus bandwidth x
protocol share)`` for each of NCCL's protocols -- LL, LL128 (NVLink nodes) and Simple -- and, for
an all-reduce across nodes, each of ring and tree, and NCCL runs the fastest, as this model
does. The factors are nccl-tests ``doc/PERFORMANCE.md``'s (all-reduce 2(n-1)/n, all-gather and
reduce-scatter (n-1)/n, all-to-all (n-1)/n, send/recv 1); a ring's latency is ``base + steps x
per-hop latency`` (Simple, commit 01afd20: 8.4 us + 3.4 us per NVLink hop, 5.7 us per PCIe hop,
9.6 us per network hop; LL, today's NCCL: 6.6 us + 0.6 / 1.0 / 2.7 us at half the bandwidth;
LL128: 14 us + 1.9 / 2.5 / 4.0 us at 0.92 of it). Small messages ride LL: an 8-rank NVLink
all-reduce of a few kB takes ~15 us, not Simple's ~56 us. An all-reduce across nodes may take
NCCL's tree (algorithm bandwidth half the bus bandwidth; Simple latency 2 x (intra-node hops x
28 us + log2(nodes) x 50 us)).

The data-parallel, tensor-parallel ... groups are laid out as Megatron-LM does (tensor parallel
innermost, then context, then data, then pipeline): a group whose members are ``stride`` ranks
apart stays inside a node while ``stride x size <= gpus per node``; otherwise it crosses the
network. The network's rate (``--inter-node``) is per GPU: one NIC a GPU (rail-optimized, as on
DGX/HGX nodes), a node's total ``gpus per node x`` that; a source that states a node's rate is
read as that rate over its GPUs. A ring or tree collective across nodes holds as many NICs as the
group has GPUs in a node -- NCCL's channels leave the node through every NIC at once -- so its
bus bandwidth is ``min(node link, members per node x NIC rate)``: 8 x 50 GB/s for an FSDP group of
whole H100 nodes at 400 Gb/s a GPU, one NIC's 50 GB/s for a data-parallel group of one GPU a node
(TP 8 inside it); an all-to-all and a send ride one GPU's NIC (:meth:`Topology.bandwidth`).

Not modeled: NVLS (NVLink SHARP: the NVSwitch reduces in-network on H100/H200/B200 nodes;
tuning.cc's NVLS and NVLS-tree algorithms), CollNet/SHARP in the InfiniBand switches, PAT (one GPU
a node), NCCL's per-channel LL128 and tree caps (gpuplan counts no channels), the tree's network
latency that a ring of one GPU a node takes, and the environment's overrides (``NCCL_ALGO``,
``NCCL_PROTO``, ``NCCL_CROSS_NIC``, ``NCCL_PXN_DISABLE``, ``NCCL_MIN/MAX_NCHANNELS``): gpuplan
times NCCL's defaults.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Literal

from .._record import record
from ..errors import InputError, UnsupportedError, opt, shown

__all__ = ["Link", "Topology", "parse_inter_node", "topology_for", "collective_time",
           "DEFAULT_INTER_NODE", "Collective", "NCCL_SOURCE", "PROTOCOLS",
           "collective_protocol", "nvlink_domain"]

NCCL_SOURCE = ("NCCL src/graph/tuning.cc (baseLat/hwLat by protocol: LL, LL128, Simple) and "
               "nccl-tests doc/PERFORMANCE.md (bus-bandwidth factors)")

Collective = Literal["all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv"]

LinkKind = Literal["nvlink", "pcie", "infiniband", "roce", "ethernet"]

#: NCCL's protocols: LL (8-byte stores, 4 bytes of data and a flag: the least latency, half
#: the bus bandwidth), LL128 (120 data bytes in each 128: 0.92 of it; on NVLink nodes, where
#: NCCL enables it by default) and Simple (the full bandwidth, the most latency). NCCL times each
#: with its model and runs the fastest; so does :func:`collective_time`.
Protocol = Literal["LL", "LL128", "Simple"]
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")
#: tuning.cc ring base latency and per-hop latency by protocol and hardware, seconds. Simple's
#: as at commit 01afd20; LL's and LL128's as NCCL has them today (master 5067397, June 2026:
#: ``baseLatencies`` / ``hwLatencies``). Today's Simple network hop (14 us) and tree latencies
#: are not taken: the published training runs gpuplan is checked against were timed with these.
_RING_BASE_S = {"LL": 6.6e-6, "LL128": 14.0e-6, "Simple": 8.4e-6}
_RING_HOP_S = {"LL": {"nvlink": 0.6e-6, "pcie": 1.0e-6, "net": 2.7e-6},
               "LL128": {"nvlink": 1.9e-6, "pcie": 2.5e-6, "net": 4.0e-6},
               "Simple": {"nvlink": 3.4e-6, "pcie": 5.7e-6, "net": 9.6e-6}}
#: Tree (all-reduce only): base latency, per-hop latency inside a node and across the network.
_TREE_BASE_S = {"LL": 6.8e-6, "LL128": 14.0e-6, "Simple": 0.0}
_TREE_HOP_S = {"LL": {"nvlink": 0.6e-6, "pcie": 1.0e-6, "net": 5.0e-6},
               "LL128": {"nvlink": 1.25e-6, "pcie": 1.9e-6, "net": 8.5e-6},
               "Simple": {"nvlink": 28e-6, "pcie": 28e-6, "net": 50e-6}}
#: Share of the bus bandwidth each protocol carries (tuning.cc's "model refinements"): the ring's
#: LL 0.5, LL128 0.92; the tree's LL 0.92 / 3.8 and LL128 0.92 x 120/128 (its Simple as before,
#: the whole). NCCL also caps LL and LL128 per channel and per architecture (``llMaxBws``,
#: ``perChMaxRingLL128Bws``); gpuplan counts no channels, so those caps are not applied.
_RING_SHARE = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}
_TREE_SHARE = {"LL": 0.92 / 3.8, "LL128": 0.92 * 120 / 128, "Simple": 1.0}
#: tuning.cc ``llMaxBws`` (master 5067397): NCCL caps LL's bus bandwidth across nodes at 39 GB/s
#: over two nodes and 20.4 GB/s over more (an Intel host's row; AMD's: 22.5 and 19.0), whatever
#: the NICs -- LL's 8-byte stores do not aggregate them as Simple and LL128 do.
_LL_MAX_BUS = {2: 39.0e9, 3: 20.4e9}
#: A ring across nodes launches every step through the network proxy: each intra-node hop takes
#: at least NCCL's ``getNetOverhead`` (1 us on an x86 host), 3x that for Simple.
_NET_OVERHEAD_S = 1.0e-6

#: The network assumed when none is named: 400 Gb/s per GPU InfiniBand (NDR; one ConnectX-7 per
#: GPU, as on DGX H100 and the Llama 3 clusters' RoCE at the same rate).
DEFAULT_INTER_NODE = "ib-400"

_NET_KINDS = {"ib": "infiniband", "infiniband": "infiniband", "roce": "roce",
              "eth": "ethernet", "ethernet": "ethernet"}
_RATE_RE = r"^([0-9]*\.?[0-9]+)\s*(gb/s|gbps|gbit/s|gbit|g)?$"  # compiled on first use


@record
class Link:
    """One kind of link, as one GPU sees it."""

    name: str
    kind: LinkKind
    bandwidth: float
    """Bytes/s per GPU in one direction (the rate a ring step moves data at)."""

    @property
    def hop(self) -> str:
        return self.kind if self.kind in ("nvlink", "pcie") else "net"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "bandwidth": self.bandwidth}


@record
class Topology:
    """GPUs per node on ``intra``, nodes joined by ``inter``."""

    gpus_per_node: int
    intra: Link
    inter: Link
    default_network: bool = False
    """The network was not named (400 Gb/s per GPU assumed): said in every output."""
    bridge: int = 0
    """GPUs an NVLink bridge joins (2: a PCIe card's bridge joins a pair); 0 when ``intra``
    spans the node (NVSwitch, a mesh, or PCIe itself)."""
    pcie: Link | None = None
    """The PCIe link between bridged groups (``bridge`` > 0)."""
    nvlink_domain: int = 0
    """GPUs the SKU's NVLink domain joins where it spans more than a node (72: an NVL72 rack;
    :func:`nvlink_domain`), 0 otherwise."""

    @property
    def node_link(self) -> Link:
        """The slowest link inside a node: PCIe between bridged pairs, else ``intra``."""
        return self.pcie if self.bridge and self.pcie is not None else self.intra

    def within(self, span: int) -> Link:
        """The link inside a node for a group spanning ``span`` consecutive GPUs of it:
        ``intra``, or PCIe where the group reaches past an NVLink bridge's pair."""
        return self.node_link if self.bridge and span > self.bridge else self.intra

    def link(self, size: int, stride: int = 1) -> tuple[Link, int]:
        """(the link a group of ``size`` ranks ``stride`` apart rides, nodes it spans)."""
        span = size * stride
        if span <= self.gpus_per_node:
            return self.within(span), 1
        return self.inter, min(size, math.ceil(span / self.gpus_per_node))

    def node_hop(self, size: int, stride: int = 1) -> str:
        """The hop (``nvlink``/``pcie``) a ring over the group takes inside each node."""
        return self.within(min(size * stride, self.gpus_per_node)).hop

    def per_node(self, size: int, stride: int = 1) -> int:
        """Members of a group of ``size`` ranks ``stride`` apart in its emptiest node (1 when
        ``stride`` is a node or more: one GPU per node; 1 in the second node of a group of 9
        consecutive GPUs on nodes of 8) -- the NICs a ring across its nodes holds everywhere."""
        if size * stride <= self.gpus_per_node:
            return size
        full = max(1, min(size, self.gpus_per_node // stride))
        return size % full or full

    def bandwidth(self, size: int, stride: int = 1,
                  op: str = "all-reduce") -> tuple[Link, int, float]:
        """(link, nodes spanned, bus bytes/s per rank) of an ``op`` over ``size`` ranks
        ``stride`` apart: the node's link inside a node; across nodes, for the ring and tree
        collectives (all-reduce, all-gather, reduce-scatter), the slower of the node's link and
        the NICs the group's members in a node hold between them -- ``min(members per node,
        NICs)`` NICs, one per GPU at ``inter``'s rate (:data:`NIC_SOURCE`); for all-to-all and
        send/recv, one GPU's own NIC.

        Why: NCCL runs a ring (or tree) collective across nodes as ``nChannels`` rings, each
        leaving the node through its own NIC, the GPUs between joined by NVLink (with PXN a GPU
        reaches the NIC nearest the destination over NVLink), and prices it at ``nChannels x
        bwInter`` (tuning.cc, ``busBw = graphs[a]->nChannels * bw``): a node's chunk of the
        ring crosses the network once per channel, so each GPU's inter-node traffic is its
        share over the node's NICs, the NVLink phase and the network phase pipelined (the
        ring's rate is the slower of the two). A group of one GPU per node (tensor parallel
        inside the node) holds one NIC, shared by the other groups' GPUs where the node has
        fewer NICs than GPUs (``inter``'s rate is per GPU: a node's rate / its GPUs). An
        all-to-all's and a send's bytes are each GPU's own: they ride its NIC ("Alltoall
        cannot aggregate the bandwidth of multiple NICs", NVIDIA/nccl-tests #267)."""
        link, nodes = self.link(size, stride)
        if nodes == 1:
            return link, nodes, link.bandwidth
        nics = self.per_node(size, stride) if op in _RING_OPS else 1
        return link, nodes, min(nics * link.bandwidth, self.node_link.bandwidth)

    @property
    def stated(self) -> str:
        """The one line every layout output carries."""
        gbps = self.inter.bandwidth * 8 / 1e9
        net = f"{self.inter.name} ({gbps:.0f} Gb/s per GPU)" if gbps >= 10 else \
            f"{self.inter.name} ({gbps:.3g} Gb/s per GPU)"
        if self.bridge and self.pcie is not None:
            node = (f"{self.intra.name} joining pairs ({self.intra.bandwidth / 1e9:.0f} GB/s per "
                    f"GPU each way), {self.pcie.name} between them "
                    f"({self.pcie.bandwidth / 1e9:.0f} GB/s)")
        else:
            node = f"{self.intra.name} ({self.intra.bandwidth / 1e9:.0f} GB/s per GPU each way)"
        rack = (f" (its NVLink domain is {self.nvlink_domain} GPUs: --gpus-per-node "
                f"{self.nvlink_domain} times the rack as one)"
                if self.gpus_per_node < self.nvlink_domain else "")
        return (f"{self.gpus_per_node} GPUs per node on {node}{rack}; nodes on {net}"
                + (" -- assumed, give --inter-node" if self.default_network else ""))

    def to_dict(self) -> dict:
        return {"gpus_per_node": self.gpus_per_node, "intra": self.intra.to_dict(),
                "inter": self.inter.to_dict(), "default_network": self.default_network,
                "stated": self.stated}


def parse_inter_node(text: str) -> Link:
    """A network link per GPU: ``ib-400``, ``roce-200``, ``eth-100``, ``400Gb/s`` (InfiniBand
    assumed for a bare rate), ``50GB/s`` (bytes)."""
    raw = str(text).strip()
    kind_part, sep, rate_part = raw.lower().partition("-")
    if sep and kind_part in _NET_KINDS:
        kind, rate = _NET_KINDS[kind_part], rate_part
    else:
        kind, rate = "infiniband", raw
    m = re.match(_RATE_RE, rate.strip(), re.IGNORECASE)
    if not m:
        raise InputError(f"{opt('inter_node')} {shown(raw)}: expected ib-400, roce-200, eth-100 "
                         "or a rate per GPU such as 400Gb/s or 50GB/s", field="inter_node",
                         value=raw, accepted="ib-400, roce-200, eth-100 or a rate per GPU such "
                         "as 400Gb/s or 50GB/s")
    value = float(m.group(1))
    unit = m.group(2) or "Gb/s"
    gbit = value * 8 if unit in ("GB/s", "GBps") else value  # capital B: bytes
    if not (0 < gbit <= 1e5):
        raise InputError(f"{opt('inter_node')} {shown(raw)}: expected a rate > 0 and <= 100000 "
                         "Gb/s per GPU, e.g. ib-400 (Gb/s)", field="inter_node", value=raw)
    label = {"infiniband": "InfiniBand", "roce": "RoCE", "ethernet": "Ethernet"}[kind]
    return Link(name=f"{label} {gbit:g} Gb/s", kind=kind, bandwidth=gbit / 8 * 1e9)


def topology_for(gpu: object, *, gpus_per_node: int = 8,
                 inter_node: str | None = None) -> Topology:
    """The topology of a job on ``gpu`` (a catalog :class:`~gpuplan.hardware.GPU`): its NVLink
    (half the catalog's both-direction total, per direction) when it has one, else its PCIe link;
    ``inter_node`` parsed, or 400 Gb/s per GPU InfiniBand (stated)."""
    if isinstance(gpus_per_node, bool) or not isinstance(gpus_per_node, int) or gpus_per_node < 1:
        raise InputError(f"{opt('gpus_per_node')} {shown(gpus_per_node)}: expected a whole "
                         "number >= 1", field="gpus_per_node", value=gpus_per_node)
    domain = nvlink_domain(gpu)
    if domain and gpus_per_node > domain:
        raise InputError(f"{opt('gpus_per_node')} {gpus_per_node}: {gpu.name}'s NVLink domain is "
                         f"{domain} GPUs (an NVL{domain} rack); give at most {domain}",
                         field="gpus_per_node", value=gpus_per_node, fix={"gpus_per_node": domain})
    nv = getattr(gpu, "interconnect_bandwidth", None)
    bw = getattr(gpu, "pcie_bandwidth", None)
    pcie = Link(name=f"PCIe gen{gpu.pcie_gen} x{gpu.pcie_lanes}", kind="pcie",
                bandwidth=bw) if bw else None
    name = getattr(gpu, "interconnect", None) or "NVLink"
    bridge = 0
    if nv:
        if domain and gpus_per_node == domain:
            name = f"{name}: the NVL{domain} rack's one NVLink domain"
        intra = Link(name=name, kind="nvlink", bandwidth=nv / 2)
        if "bridge" in name.lower() and pcie is not None:
            # a PCIe card's NVLink bridge joins two cards (NVIDIA's A100/H100 PCIe, H100 NVL
            # and RTX/A-series product briefs); the rest of the node talks over PCIe
            bridge = 2
    elif pcie is not None:
        intra = pcie
    else:
        raise UnsupportedError(f"{getattr(gpu, 'name', gpu)} has neither NVLink nor a PCIe "
                               "link in the catalog: a multi-GPU layout needs one")
    inter = parse_inter_node(inter_node or DEFAULT_INTER_NODE)
    return Topology(gpus_per_node=gpus_per_node, intra=intra, inter=inter,
                    default_network=inter_node is None, bridge=min(bridge, gpus_per_node),
                    pcie=pcie if bridge else None, nvlink_domain=domain or 0)


def nvlink_domain(gpu: object) -> int | None:
    """GPUs one NVLink domain of ``gpu`` joins where the catalog records it
    (``nvlink_domain_gpus``: 72 on a GB200/GB300 NVL72, whose NVLink Switch trays join the whole
    rack), else None: an HGX board's domain is its node. ``--gpus-per-node 72`` on such a GPU
    reads as the rack: every group of up to 72 consecutive ranks rides NVLink."""
    extra = getattr(gpu, "extra", None) or {}
    value = extra.get("nvlink_domain_gpus")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


#: The collectives NCCL runs as rings or trees, whose inter-node traffic spreads over the NICs.
_RING_OPS = frozenset({"all-reduce", "all-gather", "reduce-scatter"})

_FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
           "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n,
           "send-recv": lambda n: 1.0}


@lru_cache(maxsize=65536)
def collective_time(op: Collective, nbytes: float, size: int, topo: Topology, *,
                    stride: int = 1, efficiency: float = 1.0) -> float:
    """Seconds for one NCCL ``op`` of ``nbytes`` (the full buffer, as nccl-tests sizes it) over a
    group of ``size`` ranks ``stride`` apart; ``efficiency`` is the share of the link's rate a
    collective reaches. The fastest of NCCL's protocols (:data:`PROTOCOLS`) and, for an
    all-reduce across nodes, of its ring and tree, as NCCL's tuner picks. Zero for one rank or
    no bytes."""
    return min(_choices(op, nbytes, size, topo, stride, efficiency))[0]


def collective_protocol(op: Collective, nbytes: float, size: int, topo: Topology, *,
                        stride: int = 1, efficiency: float = 1.0) -> str:
    """The algorithm and protocol :func:`collective_time` picks, e.g. ``"ring/LL"`` (``""``
    for one rank or no bytes)."""
    return min(_choices(op, nbytes, size, topo, stride, efficiency))[1]


def _choices(op: Collective, nbytes: float, size: int, topo: Topology, stride: int,
             efficiency: float) -> list[tuple[float, str]]:
    if size <= 1 or nbytes <= 0:
        return [(0.0, "")]
    link, nodes, bw = topo.bandwidth(size, stride, op)
    bus = bw * efficiency
    if op == "send-recv":
        return [(_RING_BASE_S["Simple"] + _RING_HOP_S["Simple"][link.hop] + nbytes / bus,
                 "p2p/Simple")]
    hop = topo.node_hop(size, stride)
    protocols = [p for p in PROTOCOLS if p != "LL128" or hop == "nvlink"]
    steps = 2 * (size - 1) if op == "all-reduce" else size - 1
    inter_steps = (2 if op == "all-reduce" else 1) * (nodes - 1)
    out = []
    for p in protocols:
        intra = _RING_HOP_S[p][hop]
        if nodes > 1:
            intra = max(intra, _NET_OVERHEAD_S * (3 if p == "Simple" else 1))
        lat = (_RING_BASE_S[p] + (steps - inter_steps) * intra
               + inter_steps * _RING_HOP_S[p][link.hop])
        out.append((lat + nbytes * _FACTOR[op](size) / _bus(p, bus, nodes, _RING_SHARE),
                    f"ring/{p}"))
    if op == "all-reduce" and nodes > 1:
        per_node = max(1, size // nodes)
        for p in protocols:
            lat = _TREE_BASE_S[p] + 2 * ((per_node - 1) * _TREE_HOP_S[p][hop]
                                         + math.log2(nodes) * _TREE_HOP_S[p]["net"])
            out.append((lat + 2 * nbytes / _bus(p, bus, nodes, _TREE_SHARE), f"tree/{p}"))
    return out


def _bus(p: Protocol, bus: float, nodes: int, share: dict[str, float]) -> float:
    """The bus bandwidth protocol ``p`` carries: its share of ``bus``, LL's capped across nodes
    (:data:`_LL_MAX_BUS`)."""
    rate = bus * share[p]
    return min(rate, _LL_MAX_BUS[min(nodes, 3)]) if p == "LL" and nodes > 1 else rate
