"""What a blank cell means: the documented defaults and the reference fabrics."""

from __future__ import annotations

# Blank cells: the value used and why (printed in the report).
DEFAULTS = {
    "kv_heads": ("= heads", "no grouped-query attention unless stated (runs_dev.csv README)"),
    "vpp": ("1; 2 for ZB-V; where schedule is interleaved, the fastest depth (2-16 chunks per rank) that fits",
            "no interleaved schedule unless stated; ZB-V's V is two chunks per rank; a run's authors tune the "
            "depth for speed"),
    "micro_batch": ("1; with ZeRO-3 at pp = 1, global_batch / dp",
                    "Megatron-LM's default micro-batch size; FSDP stacks (torchtitan's local_batch_size, MaxText's "
                    "per_device_batch_size) run the replica's batch at once unless gradient accumulation is stated"),
    "sp": ("on with tp > 1", "Megatron-Core and NeMo turn sequence parallelism on with tensor parallelism "
           "(Korthikanti et al. 2022 introduced it; earlier runs state sp 0); off at tp = 1"),
    "cp": (1, "no context parallelism unless stated; where the row states dp, tp and pp, num_gpus / (dp x tp x pp), "
              "the only value they leave (tables without a CP column)"),
    "pp": ("num_gpus / (dp x tp x cp) where the row states dp, tp and cp",
           "the only pipeline depth the stated split leaves; with dp blank too, no default"),
    "ep": ("1; on an MoE model the fastest that places",
           "a dense model has no experts; an MoE run's authors tune its expert parallelism for speed: the "
           "divisor of the experts of least predicted step time that fits, else the fastest (chosen_by_speed)"),
    "etp": ("tp; 1 where ep x tp does not divide a stage's GPUs", "Megatron-Core's --expert-tensor-parallel-size "
            "defaults to tp; a run whose expert-parallel group could not also split each expert tp ways kept its "
            "experts whole (etp 1, MoE parallel folding), as Megatron-Bridge's MoE recipes set it"),
    "stack": ("stack= of the command line; generic where it names none",
              "a row's software flags are its stack's (conf/stack/<stack>.yaml) where its cell of the flag is "
              "blank; the shipped files name theirs"),
    "ep_comm_overlap": ("the stack's", "MoE all-to-alls exposed in every stack but DeepSeek's (DualPipe): "
                        "Megatron-Core's --overlap-moe-expert-parallel-comm and Megatron-Bridge's CommOverlapConfig "
                        "default to off, AutoModel and torchtitan lack the option; a recipe that sets it states it"),
    "ep_two_hop": ("the stack's", "the flat all-to-all but in NeMo AutoModel (DeepEP) and DeepSeek's "
                   "node-limited routing; a recipe on DeepEP or HybridEP states it"),
    "gpus_per_node": ("the GPU's NVLink domain", "8 on HGX/DGX nodes, 72 on GB200/GB300 NVL72 racks (conf/gpu)"),
    "experts": (1, "dense model (runs_moe_dev.csv columns: experts, top_k, moe_ffn_hidden, shared_experts, "
                "dense_layers, attention, qk_head_dim)"),
    "top_k": (1, "dense model"),
    "moe_ffn_hidden": ("= ffn_hidden", "every expert as wide as the dense MLP (Mixtral)"),
    "shared_experts": (0, "no shared expert"),
    "dense_layers": (0, "every layer of an MoE model routed"),
    "measured_iter_time_s": ("global_batch x seq_len / (tokens/s per GPU x GPUs)",
                             "the step time the row's stated batch and throughput imply, as the shipped rows "
                             "derive it; not compared where the batch is not stated"),
    "global_batch": ("step x tokens/s per GPU x GPUs / seq_len; else dp x micro_batch x pp",
                     "the batch the row's own throughput and step time imply; a row stating neither: one "
                     "micro-batch per data-parallel replica (per pipeline stage under PP), as long-sequence "
                     "benchmarks run"),
    "recompute": ("the least that fits",
                  "none, else selective, else whole-layer recompute of the fewest layers per stage "
                  "(Megatron's block method), up to full: the first the memory model says fits (the run "
                  "was measured, so it fit); from selective where the cell says only that recompute was on (yes, "
                  "on, true, enabled, 1)"),
    "offload_layers": ("0; where offload_available and recompute is blank, the fewest layers that fit if faster",
                       "where recompute is blank and the run needs some to fit, NeMo's and Megatron-Bridge's 2025-2026 "
                       "recipes may offload activations to host memory instead (Megatron-Core --cpu-offloading; GB200 "
                       "and GB300 Llama 3 70B/405B recipes): the model takes whichever of the two it finds faster"),
    "zero_stage": ("the stack's (Megatron-Core 1, torchtitan, AutoModel and FSDP 3); else the training preset's",
                   "the distributed optimizer is the Megatron-Core/NeMo default; torchtitan and AutoModel shard "
                   "with FSDP2 (ZeRO-3) over their data-parallel ranks by default"),
    "hybrid_shard": ("the stack's", "ZeRO-3 rows that name neither FULL_SHARD nor HYBRID_SHARD/HSDP: "
                     "Megatron-FSDP (the ZeRO-3 of Megatron-Core stacks) shards over the whole data-parallel group "
                     "and prefetches its gathers (model.megatron_fsdp); torchtitan and AutoModel shard FSDP2 over "
                     "every data-parallel rank (data_parallel_shard_degree -1); PyTorch FSDP's HYBRID_SHARD as in "
                     "the 2024 FSDP blog and MaxText's FSDP within a node"),
    "vocab": ("by model family", "Llama 3: 128,256 (Dubey et al. 2024); Llama 2: 32,000 (Touvron et al. 2023); "
              "Nemotron: 256,000 (Nemotron-4, NVIDIA 2024); GPT-NeoX: 50,432 (Black et al. 2022, 20B.yml); "
              "other GPT: 51,200 (Megatron's padded GPT-2 BPE, Narayanan et al. 2021)"),
    "tp": ("num_gpus / (dp x pp x cp) where the row states dp, pp and cp; where pp is blank too, the largest "
           "of 8, 4, 2, 1 dividing num_gpus / (dp x cp), pp the rest; with dp blank too, the fastest split that fits",
           "the model-parallel split of Narayanan et al. 2021 Table 1 (TP within the 8-GPU node); where a row "
           "states none of tp, pp, dp: the (tp, pp) the model finds fastest among those that fit in memory, tp "
           "within the NVLink domain (the run was measured, so it fit, and published runs are tuned)"),
    "precision": ("bf16", "mixed precision with bf16 GEMMs, the default of every 2022-2026 training stack; fp8 "
                  "only where a row says so"),
    "nvfp4_bf16_share": ("the stack's: 0 in Megatron-Core, else the training preset's 0.16",
                         "NVFP4 rows: Megatron-Bridge's and NeMo's benchmark recipe (bf16_with_nvfp4_mixed) quantizes "
                         "every transformer layer (first_last_layers_bf16 off); a recipe that keeps layers in BF16 "
                         "states the share (Nemotron 3 Super's last 14); elsewhere the NVFP4 pre-training recipe's "
                         "~16 % of the layers in BF16 (arXiv:2509.25149)"),
    "architecture": ("the catalog model the row names", "layers, widths, heads, vocabulary, sequence length, experts "
                     "and MLA ranks a row leaves blank are those of the conf/model entry its model cell names, "
                     "with params_b appended where the cell names a family alone ('Llama 3.1', 'Nemotron4') "
                     "(Llama 2 7B/70B, Llama 3/3.1 8B, 70B, 405B, Llama 4 Scout/Maverick, DeepSeek-V2/V2-Lite, "
                     "DeepSeek-V3, Kimi K2, Qwen2.5 7B/14B/32B/72B, Qwen3 0.6B/1.7B/4B/8B/14B/32B, "
                     "Qwen3-30B-A3B, Qwen3-235B-A22B, GLM-4.5 and GLM-4.5-Air, gpt-oss-120b, "
                     "Mixtral 8x7B/8x22B, GPT-3 175B, Grok-1, Nemotron-4 15B/340B, "
                     "Nemotron-H 8B/47B/56B, Nemotron 3 Nano/Super/Ultra, Nemotron 3.5 Lightning, gpt-oss-20b; "
                     "each file cites its config); a hybrid Mamba-2 model's layer pattern and Mamba shape always "
                     "come from its entry, and its multi-token-prediction depth where mtp_layers is blank "
                     "(Megatron-Bridge's Nemotron 3 recipes train two MTP passes)"),
    "inter_node": ("the GPU's reference system", "A100: 8 x HDR200 IB; H100/H200/H800, B200 and GB200: NDR400 IB "
                   "(ConnectX-7; DGX B200 and DGX GB200 user guides: one 400 Gb/s port per GPU); B300/GB300: "
                   "XDR800 IB (ConnectX-8); GH200: NDR200 IB (JSC JUPITER: 4 x NDR200 per node of four); "
                   "MI300X/MI325X/MI350X/MI355X: 400 Gb/s RoCE; one NIC per GPU (DGX/HGX reference designs)"),
}


REFERENCE_FABRIC = {"a100_80gb": "ib_hdr200", "a100_40gb": "ib_hdr200", "a800": "ib_hdr200",
                    "h100_sxm": "ib_ndr400", "h200": "ib_ndr400",
                    "h800": "ib_ndr400", "gh200": "ib_ndr200", "b200": "ib_ndr400", "gb200": "ib_ndr400",
                    "b300": "ib_xdr800", "gb300": "ib_xdr800", "mi300x": "roce400", "mi325x": "roce400",
                    "mi350x": "roce400", "mi355x": "roce400"}


# inter_node key -> (catalog fabric, Gbit/s per NIC or None for the catalog's, NICs per node or None = per GPU)
FABRICS = {
    "ib_hdr200x8": ("ib_hdr200", None, 8), "ib_ndr400x8": ("ib_ndr400", None, 8),
    "ib_hdr200x4": ("ib_hdr200", None, 4), "ib_edr100x8": ("ib_hdr200", 100.0, 8),
    "roce400x8": ("roce400", None, 8), "roce200x8": ("roce400", 200.0, 8),
    "roce_1600gbps_node": ("roce400", 200.0, 8),  # 1600 Gbit/s per node as 8 x 200G RoCE
    # Intel Omni-Path 100 (100 Gbit/s per port, RDMA through PSM2/verbs): IB-like, one port per GPU
    # unless the row says otherwise (as for the other keys without a count).
    "omnipath": ("ib_hdr200", 100.0, None),
}


# A fabric kind in words -> the catalog fabric; IB of a stated rate is the generation that
# carries it (_ib_fabric).
SPELLED_FABRIC = {"ib": "ib_ndr400", "roce": "roce400", "tcp": "eth100_tcp"}


VOCAB = [(r"llama.?3", 128256), (r"llama.?2", 32000), (r"nemotron", 256000), (r"neox", 50432), (r"", 51200)]
