"""The boot marker: the engine's ServerArgs as each build prints them."""
from __future__ import annotations

import os

from . import knobs
from .constants import MAX_PREFILL_TOKENS, PAGE_SIZE


def server_args_fields(run) -> dict:
    """The engine's ServerArgs as a dict in field order (about 500 fields: upstream SGLang's, with upstream
    defaults, plus the build's Engram and DSPARK ones). The new build's marker is about 17.1 KB with the
    report's settings, like the real head's 17,130 bytes; the old build's ServerArgs(...) form over 16 KiB."""
    args = run.args
    k = args.dspark_block_size
    api = "[REDACTED]" if os.environ.get("API_KEY") else None
    if run.build == "old" and api:
        api = "***"
    offload = os.environ.get("OFFLOAD_MODE", "nvme") or "nvme"
    bs = list(range(1, args.max_running_requests + 1))
    f: dict = {}
    f.update(model_path=args.model_path, tokenizer_path=args.model_path, tokenizer_mode="auto",
             tokenizer_worker_num=1, skip_tokenizer_init=False, load_format="auto",
             model_loader_extra_config={"enable_multithread_load": True, "num_threads": 16},
             trust_remote_code=True, context_length=None, is_embedding=False, enable_multimodal=None,
             revision=None, model_impl="auto", host=args.host, port=args.port, skip_server_warmup=False,
             warmups=None, nccl_port=None, dtype="auto", quantization="fp8", quantization_param_path=None,
             kv_cache_dtype="auto", enable_fp32_lm_head=False, modelopt_quant=None,
             modelopt_checkpoint_restore_path=None, modelopt_checkpoint_save_path=None,
             mem_fraction_static=args.mem_fraction_static, max_running_requests=args.max_running_requests,
             max_queued_requests=None, max_total_tokens=args.max_total_tokens,
             chunked_prefill_size=args.chunked_prefill_size, max_prefill_tokens=MAX_PREFILL_TOKENS,
             schedule_policy="fcfs", enable_priority_scheduling=False, schedule_low_priority_values_first=False,
             priority_scheduling_preemption_threshold=10, schedule_conservativeness=1.0, page_size=PAGE_SIZE,
             hybrid_kvcache_ratio=None, swa_full_tokens_ratio=0.8, disable_hybrid_swa_memory=False,
             radix_eviction_policy="lru", device="cuda", elastic_ep_backend=None, mooncake_ib_device=None,
             tp_size=args.tp_size, pp_size=1, pp_max_micro_batch_size=None, stream_interval=1,
             stream_output=False, random_seed=1040372163, constrained_json_whitespace_pattern=None,
             constrained_json_disable_any_whitespace=False, watchdog_timeout=300, dist_timeout=None,
             download_dir=None, base_gpu_id=0, gpu_id_step=1, sleep_on_idle=False, log_level="info",
             log_level_http=None, log_requests=knobs.on("LAB_ENGINE_LOG_REQUESTS"), log_requests_level=2,
             crash_dump_folder=None, show_time_cost=False, enable_metrics=False,
             enable_metrics_for_all_schedulers=False, tokenizer_metrics_custom_labels_header="x-custom-labels",
             tokenizer_metrics_allowed_custom_labels=None, bucket_time_to_first_token=None,
             bucket_inter_token_latency=None, bucket_e2e_request_latency=None, collect_tokens_histogram=False,
             prompt_tokens_buckets=None, generation_tokens_buckets=None, gc_warning_threshold_secs=0.0,
             decode_log_interval=40, enable_request_time_stats_logging=False, kv_events_config=None,
             enable_trace=False, otlp_traces_endpoint="localhost:4317", api_key=api,
             served_model_name=args.served_model_name, weight_version="default", chat_template=None,
             completion_template=None, file_storage_path="sglang_storage", enable_cache_report=False,
             reasoning_parser="deepseek-v3", tool_call_parser="deepseekv31", tool_server=None,
             sampling_defaults="model", dp_size=1, load_balance_method="round_robin",
             load_watch_interval=0.1, prefill_round_robin_balance=False,
             dist_init_addr=args.dist_init_addr or None, nnodes=args.tp_size, node_rank=args.rank,
             json_model_override_args="{}", preferred_sampling_params=None, enable_lora=None,
             max_lora_rank=None, lora_target_modules=None, lora_paths=None, max_loaded_loras=None,
             max_loras_per_batch=8, lora_eviction_policy="lru", lora_backend="triton",
             max_lora_chunk_size=16, attention_backend="flashinfer", decode_attention_backend=None,
             prefill_attention_backend=None, sampling_backend="flashinfer", grammar_backend="xgrammar",
             mm_attention_backend=None, nsa_prefill_backend="flashmla_sparse", nsa_decode_backend="fa3",
             speculative_algorithm="DSPARK", speculative_draft_model_path=args.model_path,
             speculative_draft_model_revision=None, speculative_draft_load_format=None,
             speculative_num_steps=1, speculative_eagle_topk=1, speculative_num_draft_tokens=k + 1,
             speculative_dspark_block_size=k, speculative_accept_threshold_single=1.0,
             speculative_accept_threshold_acc=1.0, speculative_token_map=None,
             speculative_attention_mode="prefill", speculative_moe_runner_backend=None,
             speculative_ngram_min_match_window_size=1, speculative_ngram_max_match_window_size=12,
             speculative_ngram_min_bfs_breadth=1, speculative_ngram_max_bfs_breadth=10,
             speculative_ngram_match_type="BFS", speculative_ngram_branch_length=18,
             speculative_ngram_capacity=10000000, ep_size=args.ep_size, moe_a2a_backend="none",
             moe_runner_backend=args.moe_runner_backend, flashinfer_mxfp4_moe_precision="default",
             enable_flashinfer_allreduce_fusion=False, deepep_mode="auto", ep_num_redundant_experts=0,
             ep_dispatch_algorithm="static", init_expert_location="trivial", enable_eplb=False,
             eplb_algorithm="auto", eplb_rebalance_num_iterations=1000, eplb_rebalance_layers_per_chunk=None,
             eplb_min_rebalancing_utilization_threshold=1.0, expert_distribution_recorder_mode=None,
             expert_distribution_recorder_buffer_size=1000, enable_expert_distribution_metrics=False,
             deepep_config=None, moe_dense_tp_size=None, max_mamba_cache_size=None, mamba_ssm_dtype="float32",
             mamba_full_memory_ratio=0.9, enable_hierarchical_cache=False, hicache_ratio=2.0, hicache_size=0,
             hicache_write_policy="write_through", hicache_io_backend="kernel", hicache_mem_layout="layer_first",
             hicache_storage_backend=None, hicache_storage_prefetch_policy="best_effort",
             hicache_storage_backend_extra_config=None, enable_lmcache=False, kt_amx_weight_path=None,
             kt_amx_method=None, kt_cpuinfer=None, kt_threadpool_count=None, kt_num_gpu_experts=None,
             enable_double_sparsity=False, ds_channel_config_path=None, ds_heavy_channel_num=32,
             ds_heavy_token_num=256, ds_heavy_channel_type="qk", ds_sparse_decode_threshold=4096,
             cpu_offload_gb=0, offload_group_size=-1, offload_num_in_group=1, offload_prefetch_step=1,
             offload_mode="cpu", engram_offload_mode=offload, engram_io_threads=96,
             engram_packed_dir=os.environ.get("DSV41_PACKED_DIR", "/engram"),
             multi_item_scoring_delimiter=None, disable_radix_cache=False, cuda_graph_max_bs=bs[-1],
             cuda_graph_bs=bs, disable_cuda_graph=False, disable_cuda_graph_padding=False,
             enable_profile_cuda_graph=False, enable_cudagraph_gc=False, enable_nccl_nvls=False,
             enable_symm_mem=False, disable_flashinfer_cutlass_moe_fp4_allgather=False,
             enable_tokenizer_batch_encode=False, disable_outlines_disk_cache=False,
             disable_custom_all_reduce=False, enable_mscclpp=False, enable_torch_symm_mem=False,
             disable_overlap_schedule=False, enable_mixed_chunk=False, enable_dp_attention=False,
             enable_dp_lm_head=False, enable_two_batch_overlap=False, enable_single_batch_overlap=False,
             tbo_token_distribution_threshold=0.48, enable_torch_compile=False,
             enable_piecewise_cuda_graph=False, torch_compile_max_bs=32, piecewise_cuda_graph_max_tokens=4096,
             piecewise_cuda_graph_tokens=None, piecewise_cuda_graph_compiler="eager", torchao_config="",
             enable_nan_detection=False, enable_p2p_check=False, triton_attention_reduce_in_fp32=False,
             triton_attention_num_kv_splits=8, triton_attention_split_tile_size=None,
             num_continuous_decode_steps=1, delete_ckpt_after_loading=False, enable_memory_saver=False,
             enable_weights_cpu_backup=False, allow_auto_truncate=False, enable_custom_logit_processor=False,
             flashinfer_mla_disable_ragged=False, disable_shared_experts_fusion=False,
             disable_chunked_prefix_cache=False, disable_fast_image_processor=False,
             keep_mm_feature_on_device=False, enable_return_hidden_states=False, scheduler_recv_interval=1,
             numa_node=None, enable_deterministic_inference=False, rl_on_policy_target=None,
             enable_dynamic_batch_tokenizer=False, dynamic_batch_tokenizer_batch_size=32,
             dynamic_batch_tokenizer_batch_timeout=0.002, debug_tensor_dump_output_folder=None,
             debug_tensor_dump_layers=None, debug_tensor_dump_input_file=None, debug_tensor_dump_inject=False,
             disaggregation_mode="null", disaggregation_transfer_backend="mooncake",
             disaggregation_bootstrap_port=8998, disaggregation_decode_tp=None, disaggregation_decode_dp=None,
             disaggregation_prefill_pp=1, disaggregation_ib_device=None,
             disaggregation_decode_enable_offload_kvcache=False, num_reserved_decode_tokens=512,
             disaggregation_decode_polling_interval=1, custom_weight_loader=[], weight_loader_disable_mmap=False,
             remote_instance_weight_loader_seed_instance_ip=None,
             remote_instance_weight_loader_seed_instance_service_port=None,
             remote_instance_weight_loader_send_weights_group_ports=None, enable_pdmux=False,
             pdmux_config_path=None, sm_group_num=8, mm_max_concurrent_calls=32, mm_per_request_timeout=10.0,
             decrypted_config_file=None, decrypted_draft_config_file=None,
             dspark_config={"block_size": k, "folded_sampling": os.environ.get("SGLANG_DSPARK_FOLDED_SAMPLING")
                            or "auto", "verify_graph_bs": bs, "draft_graph_bs": bs},
             engram_layers=[1, 14], enable_engram_stats=True, engram_stats_interval_s=60.0)
    f.update(enable_broadcast_mm_inputs_process=False, mm_process_config={}, enable_prefix_mm_cache=False,
             enable_adaptive_dispatch_to_encoder=False, encoder_only=False, language_only=False,
             encoder_transfer_backend="zmq_to_scheduler", encoder_urls=[], enable_return_routed_experts=False,
             disable_piecewise_cuda_graph=True, enforce_piecewise_cuda_graph=False,
             enable_layerwise_nvtx_marker=False, enable_draft_weights_cpu_backup=False,
             enable_torch_compile_debug_mode=False, torch_compile_max_bs_draft=None,
             speculative_draft_attention_backend=None, speculative_draft_model_quantization="fp8",
             speculative_adaptive=False, speculative_adaptive_config=None, speculative_spec_v2=False,
             enable_spec_overlap=False, ngram_worker_num=1, hicache_storage_pass_prefix_keys=False,
             hierarchical_sparse_attention_extra_config=None, enable_hisparse=False,
             enable_fused_qk_norm_rope=False, enable_shared_experts_dp=False, enable_aiter_allreduce_fusion=False,
             enable_fused_moe_sum_all_reduce=False, disable_flashinfer_autotune=False,
             flashinfer_autotune_cache_dir="/root/.cache/sglang/flashinfer/autotune",
             enable_flashinfer_autotune_cache=True, moe_dense_tp_size_override=None, dsv4_swa_window=128,
             dsv4_index_topk=2048, dsv4_c4_ratio=4, dsv4_c128_ratio=128, dsv4_compress_state_dtype="bfloat16",
             dsv4_full_token_budget=None, dsv4_kv_layout={"full": "paged", "swa": "ring", "c4": "paged",
                                                          "c128": "paged"},
             enable_request_mem_report=False, enable_cache_report_per_rank=False, kv_cache_swap_space_gb=0.0,
             tokenizer_cache_dir=None, preferred_rope_scaling=None, override_generation_config=None,
             enable_generation_config_defaults=True, allowed_local_media_path="", max_mm_items_per_request=None,
             attn_cp_size=1, moe_dp_size=1, enable_nsa_prefill_context_parallel=False,
             nsa_prefill_cp_mode="in-seq-split", enable_fused_set_kv_buffer=True,
             enable_mis_fused_kernels=False, served_model_name_aliases=[], uvicorn_log_config=None,
             skip_tokenizer_warmup=False, warmup_thread_num=1, enable_http2=False, ssl_keyfile=None,
             ssl_certfile=None, ssl_ca_certs=None, ssl_keyfile_password=None, admin_api_key=None,
             enable_admin_endpoints=False, enable_score_api=False, enable_tokenize_api=True,
             stream_response_default_include_usage=False, incremental_streaming_output=True,
             enable_custom_all_reduce_for_draft=True, gpu_memory_utilization_report=False,
             cpu_weight_offload_layers=None, hicache_l3_prefetch_threshold=256)
    # fields of later upstream ServerArgs revisions the build carries (upstream defaults, as resolved at start)
    f.update(tokenizer_backend="huggingface", detokenizer_worker_num=1, model_config_parser="auto",
             fastapi_root_path="", grpc_mode=False, smg_grpc_mode=False, grpc_port=None, sidecar=None,
             sidecar_args=None, http2_max_concurrent_streams=200, enable_ssl_refresh=False,
             checkpoint_engine_wait_weights_before_ready=False, modelopt_export_path=None,
             quantize_and_serve=False, rl_quant_profile=None, enable_tf32_matmul=False,
             prefill_decode_interval=0, enable_dynamic_chunking=False, prefill_max_requests=None,
             disable_priority_preemption=False, default_priority_value=None, abort_on_priority_when_disabled=False,
             retraction_policy="length", enable_prefill_delayer=False, prefill_delayer_max_delay_passes=30,
             prefill_delayer_token_usage_low_watermark=None, prefill_delayer_forward_passes_buckets=None,
             prefill_delayer_wait_seconds_buckets=None, prefill_only_disable_kv_cache=False,
             enable_page_major_kv_layout=False, enable_unified_memory=False, pp_async_batch_depth=0,
             gated_launch_port=None, dcp_size=1, dwdp_size=1, dcp_comm_backend="ag_rs", dcp_replicate_q_proj=None,
             enable_prefill_cp=False, cp_strategy=None, enable_dsa_cache_layer_split=False,
             enable_prefill_context_parallel=False, prefill_cp_mode="in-seq-split", enable_cp_decode_attn_tp=False,
             enable_dp_attention_local_control_broadcast=False, enable_tp_lm_head_all_to_all=None,
             enable_attn_tp_input_scattered=False, enable_shared_experts_attn_tp=False,
             enable_dense_mlp_attn_tp=False, disable_attn_tp_gather=False, soft_watchdog_timeout=None,
             model_checksum=None, use_ray=False, custom_sigquit_handler=None, gc_threshold=None,
             log_requests_format="text", log_requests_target=None, uvicorn_access_log_exclude_prefixes=[],
             extra_metric_labels=None, smg_http_sidecar_port=None, enable_mfu_metrics=False,
             load_snapshot_publish_interval=15, enable_forward_pass_metrics=False, forward_pass_metrics_worker_id="",
             forward_pass_metrics_ipc_name=None, trace_modules="request", export_metrics_to_file=False,
             export_metrics_to_file_dir=None, stat_loggers=None, hf_chat_template_name=None,
             default_chat_template_kwargs=None, strip_thinking_cache=False, enable_strict_thinking=False,
             asr_max_buffer_seconds=60, asr_max_concurrent_sessions=32, batch_notify_size=16,
             enable_streaming_session=False, enable_session_radix_cache=False, enable_lora_overlap_loading=None,
             radix_cache_backend=None, fp8_gemm_runner_backend="auto", fp4_gemm_runner_backend="auto",
             bf16_gemm_backend="auto", dsv4_prefill_backend="auto", dsa_paged_mqa_logits_backend="auto",
             dsa_topk_backend="sgl-kernel",
             flashinfer_autotune_skip_ops=None, mamba_backend="triton", cuda_graph_config=None,
             cuda_graph_backend_decode=None, cuda_graph_backend_prefill=None, cuda_graph_max_bs_decode=None,
             cuda_graph_max_bs_prefill=None, cuda_graph_bs_decode=None, cuda_graph_bs_prefill=None,
             cuda_graph_tc_compiler=None, disable_prefill_cuda_graph=False, disable_decode_cuda_graph=False,
             debug_cuda_graph=False, speculative_moe_a2a_backend=None, enable_multi_layer_eagle=False,
             mamba_scheduler_strategy="no_buffer", mamba_track_interval=256, disable_hicache_numa_detect=False,
             kt_max_deferred_experts_per_token=None, dllm_algorithm=None,
             dllm_algorithm_config=None, disable_tokenizer_batch_decode=False,
             enable_precise_embedding_interpolation=False, crash_on_nan=False, debug_tensor_dump_prefill_only=False,
             disaggregation_decode_enable_fake_auto=False, remote_instance_weight_loader_backend="nccl",
             remote_instance_weight_loader_start_seed_via_transfer_engine=False, mm_enable_dp_encoder=False,
             limit_mm_data_per_request=None, forward_hooks=None, enable_deepseek_v4_fp4_indexer=False,
             pre_warm_nccl=False, enable_quant_communications=False,
             enforce_disable_flashinfer_allreduce_fusion=False, flashinfer_allreduce_fusion_backend=None,
             speculative_dflash_block_size=None, speculative_dspark_sps_table_path=None,
             speculative_dspark_confidence_sts_path=None,
             speculative_dspark_align_verify_tokens_to_graph_tier=False, speculative_use_rejection_sampling=False,
             speculative_dsa_topk_backend="sgl-kernel", speculative_draft_kv_cache_dtype=None,
             speculative_draft_window_size=None, speculative_skip_dp_mlp_sync=False,
             decoupled_spec_bind_endpoint=None, decoupled_spec_connect_endpoints=None, decoupled_spec_rank=None,
             decoupled_spec_role="null", spec_trace_dir=None, speculative_ngram_max_trie_depth=18,
             speculative_ngram_external_corpus_path=None, speculative_ngram_external_sam_budget=0,
             speculative_ngram_external_corpus_max_tokens=10000000, deepep_v2_mode="direct",
             deepep_dispatcher_output_dtype="auto", expert_balancedness_report_mode="off",
             enable_elastic_expert_backup=False, ep_join_mode=None, ep_join_rank_offset=0,
             elastic_ep_initial_size=None, max_ep_size=None, elastic_ep_scale_timeout=600,
             enforce_shared_experts_fusion=False, mamba_max_states_per_path=-1, mamba_radix_cache_strategy="auto",
             linear_attn_backend="triton", hicache_host_memory_mode="cache", enable_w4a4_mxfp4_megamoe=False,
             enable_waterfill=False, elastic_ep_rejoin=False, enable_mamba_cache_stochastic_rounding=False,
             mamba_cache_philox_rounds=0, enable_int8_mamba_checkpoint=False, int8_mamba_ckpt_size=None)
    return f


# An older build's ServerArgs: no Engram fields and no grouped dspark_config (its DSPARK settings are flat
# speculative_dspark_* fields), switches later folded into moe_runner_backend / moe_a2a_backend / attention_backend
# (upstream's deprecated fields), the piecewise CUDA graph token sizes resolved at start (upstream
# _generate_piecewise_cuda_graph_tokens, up to piecewise_cuda_graph_max_tokens) instead of left unset, and the
# capture sizes left at upstream's speculative default (cuda_graph_max_bs 160; the runner captures up to
# max_running_requests, as the Capture lines show).
OLD_BUILD_FIELDS = dict(enable_ep_moe=False, enable_deepep_moe=False, enable_flashinfer_moe=False,
                        enable_flashinfer_cutlass_moe=False, enable_flashinfer_trtllm_moe=False,
                        enable_triton_kernel_moe=False, enable_flashinfer_mxfp4_moe=False, enable_flashinfer_mla=False,
                        enable_flashmla=False, disable_mla=False, disable_jump_forward=False,
                        disable_regex_jump_forward=False, disable_disk_cache=False, disable_penalizer=False,
                        disable_nan_detection=False, disable_flashinfer=False, disable_flashinfer_sampling=False,
                        efficient_weight_load=False, disable_overlap_cg_plan=False, n_share_experts_fusion=0,
                        enable_llama4_multimodal=None, pdlb_url=None)
OLD_BUILD_DROPPED = ("dspark_config", "engram_offload_mode", "engram_io_threads", "engram_packed_dir", "engram_layers",
                     "enable_engram_stats", "engram_stats_interval_s", "rl_on_policy_target")


OLD_BUILD_GRAPH_MAX_BS = 160


def old_build_graph_bs(max_bs: int) -> list:
    """Upstream's default capture sizes with speculative decoding (the runner captures those <= max_running_requests)."""
    sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
    return [s for s in sizes if s <= max_bs]


def piecewise_tokens(max_tokens: int) -> list:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(640, 4096 + 1, 128)) + list(range(4352, max_tokens + 1, 256)))
    return [s for s in sizes if s <= max_tokens]


def server_args_line(run) -> str:
    fields = server_args_fields(run)
    if run.build == "old":
        dspark = fields["dspark_config"]
        for key in OLD_BUILD_DROPPED:
            fields.pop(key, None)
        for key in ("folded_sampling", "verify_graph_bs", "draft_graph_bs"):
            fields["speculative_dspark_" + key] = dspark[key]
        fields["piecewise_cuda_graph_tokens"] = piecewise_tokens(fields["piecewise_cuda_graph_max_tokens"])
        fields["cuda_graph_max_bs"] = OLD_BUILD_GRAPH_MAX_BS      # not clamped to max_running_requests
        fields["cuda_graph_bs"] = old_build_graph_bs(OLD_BUILD_GRAPH_MAX_BS)
        fields.update(OLD_BUILD_FIELDS)
        return "server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
    return "server_args=" + repr(fields)
