#!/usr/bin/env python3
"""prefix_reuse.py — a real model's KV cache through kvpool, end to end.

A small Llama-shaped decoder (token embedding; per layer RMSNorm, multi-head
attention with rotary position embeddings and grouped-query KV heads,
RMSNorm, SwiGLU MLP; final norm; LM head; random fp32 weights from --seed)
runs as a minimal inference engine with a paged KV cache:

  --role a   prefills a prompt (a shared "system prompt + document" prefix,
             then its own question) and stores its KV in the pool, one object
             per page of --page-tokens tokens, under chain-hashed page keys;
             it also stores a manifest with the SHA-256 of every page.
  --role b   has a prompt with the same prefix and a different question: it
             looks its page keys up (batch_is_exist), loads the longest cached
             prefix with batch_get_into straight into its KV tensor, computes
             only the rest, generates --generate tokens greedily, and checks
             that the bytes it loaded are A's (the manifest), that its logits
             match a full recompute without the pool (max abs diff <= 1e-4)
             and that the greedy tokens are the same. Exit 1 if a check fails.
  (default)  runs A, then B, as two processes and prints a summary.

Page keys are named the way vLLM and SGLang name prefix blocks: key_i =
sha256(key_{i-1} || token ids of page i), seeded with a fingerprint of the
model, its weights, the dtype, the page size and the page layout, which also
prefixes every key: another model (or another page layout) never reads them.

One object holds a page's K and V for all layers (layout [layer][k|v]
[kv_head][token][head_dim], fp32). A page is the unit of reuse: it is usable
only when every layer of it is there, and one key per page keeps the lookup
and the master's bookkeeping at one entry per page instead of 2 x layers.
The price is that a page's layers arrive together; per-layer objects would
let an engine load layer l + 1 while it computes layer l. The KV tensor is
page-major ([page][layer][k|v][kv_head][token][head_dim]), so each page is
one contiguous range: batch_get_into and batch_put_from move pages between
the pool and the KV tensor with no staging copy, on CPU or CUDA (libkvpool
copies device memory with the CUDA runtime).

Run it against a pool: see examples/README.md. Needs torch.
"""
import argparse
import ctypes
import hashlib
import json
import math
import os
import subprocess
import sys
import time

import torch

LOGIT_TOL = 1e-4


# ---- the model -------------------------------------------------------------

class Config:
    """The model's shape. vocab and widths are fixed; --layers and --seed
    change the model (and so its fingerprint)."""

    def __init__(self, layers=4, seed=0):
        self.vocab = 4096
        self.d_model = 256
        self.n_heads = 4
        self.n_kv_heads = 2          # grouped-query attention: 2 query heads per KV head
        self.head_dim = 64
        self.ffn = 768
        self.layers = layers
        self.rope_theta = 10000.0
        self.norm_eps = 1e-5
        self.seed = seed

    def as_dict(self):
        return dict(self.__dict__)


class Model:
    """Weights drawn on the CPU from the seed, then moved to the device, so
    every device runs the same model."""

    def __init__(self, cfg, device, max_pos):
        self.cfg = cfg
        self.device = device
        g = torch.Generator().manual_seed(cfg.seed)
        d, hd = cfg.d_model, cfg.head_dim

        def w(rows, cols, scale):
            return (torch.randn(rows, cols, generator=g) * scale).to(device)

        def norm_w():
            return (1.0 + 0.1 * torch.randn(d, generator=g)).to(device)

        self.emb = w(cfg.vocab, d, 1.0)
        self.blocks = []
        for _ in range(cfg.layers):
            self.blocks.append({
                "attn_norm": norm_w(),
                "wq": w(d, cfg.n_heads * hd, d ** -0.5),
                "wk": w(d, cfg.n_kv_heads * hd, d ** -0.5),
                "wv": w(d, cfg.n_kv_heads * hd, d ** -0.5),
                "wo": w(cfg.n_heads * hd, d, (cfg.n_heads * hd * 2 * cfg.layers) ** -0.5),
                "mlp_norm": norm_w(),
                "w_gate": w(d, cfg.ffn, d ** -0.5),
                "w_up": w(d, cfg.ffn, d ** -0.5),
                "w_down": w(cfg.ffn, d, (cfg.ffn * 2 * cfg.layers) ** -0.5),
            })
        self.final_norm = norm_w()
        self.lm_head = w(d, cfg.vocab, d ** -0.5)
        inv = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos = ang.cos().float().to(device)
        self.sin = ang.sin().float().to(device)

    def rmsnorm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.norm_eps) * weight

    def rope(self, x, cos, sin):
        """x [n, heads, head_dim]; rotates the two halves (Llama's layout)."""
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)

    def forward(self, tokens, start, kv, logits_from=None):
        """Runs tokens (positions start .. start+n-1) through the model with
        the KV of positions < start already in kv (the paged cache, which
        this fills for the new positions). Returns the logits of positions
        logits_from .. start+n-1 (default: the last one)."""
        cfg = self.cfg
        n = tokens.shape[0]
        end = start + n
        T = kv.shape[4]
        npages = (end + T - 1) // T
        hkv, g, hd = cfg.n_kv_heads, cfg.n_heads // cfg.n_kv_heads, cfg.head_dim
        pos = torch.arange(start, end, device=self.device)
        cos, sin = self.cos[start:end], self.sin[start:end]
        page, slot = pos // T, pos % T
        mask = torch.zeros(n, end, device=self.device)
        mask.masked_fill_(torch.arange(end, device=self.device)[None, :] > pos[:, None],
                          float("-inf"))
        scale = hd ** -0.5
        x = self.emb[tokens]
        for layer, b in enumerate(self.blocks):
            h = self.rmsnorm(x, b["attn_norm"])
            q = self.rope((h @ b["wq"]).view(n, cfg.n_heads, hd), cos, sin)
            k = self.rope((h @ b["wk"]).view(n, hkv, hd), cos, sin)
            v = (h @ b["wv"]).view(n, hkv, hd)
            kv[page, layer, 0, :, slot] = k
            kv[page, layer, 1, :, slot] = v
            K = kv[:npages, layer, 0].transpose(0, 1).reshape(hkv, npages * T, hd)[:, :end]
            V = kv[:npages, layer, 1].transpose(0, 1).reshape(hkv, npages * T, hd)[:, :end]
            qg = q.view(n, hkv, g, hd).permute(1, 2, 0, 3).reshape(hkv, g * n, hd)
            s = (qg @ K.transpose(1, 2)).view(hkv, g, n, end) * scale + mask
            p = torch.softmax(s, dim=-1).view(hkv, g * n, end)
            o = (p @ V).view(hkv, g, n, hd).permute(2, 0, 1, 3).reshape(n, cfg.n_heads * hd)
            x = x + o @ b["wo"]
            h = self.rmsnorm(x, b["mlp_norm"])
            x = x + (torch.nn.functional.silu(h @ b["w_gate"]) * (h @ b["w_up"])) @ b["w_down"]
        first = end - 1 if logits_from is None else logits_from
        return self.rmsnorm(x[first - start:], self.final_norm) @ self.lm_head


def fingerprint(cfg, page_tokens):
    """What a reader must share with the writer for a page to be valid for
    it: the model (architecture, sizes, weights), dtype, page size and the
    object's layout. No device: the bytes are the same layout anywhere."""
    desc = {"arch": "llama-like decoder (examples/prefix_reuse.py)",
            "config": cfg.as_dict(), "weights": "randn(seed=%d)" % cfg.seed,
            "dtype": "float32", "page_tokens": page_tokens,
            "layout": "page[layer][k,v][kv_head][token][head_dim]", "tp": "rank 0 of 1"}
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


def page_keys(fp, tokens, page_tokens):
    """Keys of the full pages of tokens: prefix/<chain hash>, where hash_i =
    sha256(hash_{i-1} || token ids of page i as int32 LE) and hash_-1 is
    derived from the fingerprint."""
    ns = "prefix-reuse/" + fp[:16]
    h = hashlib.sha256(b"kvpool prefix-reuse " + fp.encode()).digest()
    keys = []
    ids = tokens.tolist()
    for i in range(len(ids) // page_tokens):
        page = ids[i * page_tokens:(i + 1) * page_tokens]
        h = hashlib.sha256(h + b"".join(t.to_bytes(4, "little") for t in page)).digest()
        keys.append("%s/%s" % (ns, h.hex()))
    return ns, keys


def prompts(cfg, prefix_tokens, suffix_tokens, seed):
    """A's and B's prompts: the same prefix (the shared system prompt and
    document), then a question of their own that differs from the first token."""
    g = torch.Generator().manual_seed(seed + 1)
    prefix = torch.randint(0, cfg.vocab, (prefix_tokens,), generator=g)
    qa = torch.randint(0, cfg.vocab, (suffix_tokens,), generator=g)
    qb = torch.randint(0, cfg.vocab, (suffix_tokens,), generator=g)
    if suffix_tokens and qa[0] == qb[0]:
        qb[0] = (qb[0] + 1) % cfg.vocab
    return torch.cat((prefix, qa)), torch.cat((prefix, qb))


# ---- the engine: a paged KV cache backed by the pool -------------------------

class Engine:
    def __init__(self, args, store, log):
        self.args = args
        self.store = store
        self.log = log
        self.device = torch.device(args.device)
        self.cfg = Config(args.layers, args.seed)
        self.T = args.page_tokens
        self.fp = fingerprint(self.cfg, self.T)
        self.max_pos = args.prefix_tokens + args.suffix_tokens + args.generate + self.T
        self.model = Model(self.cfg, self.device, self.max_pos)
        c = self.cfg
        self.page_shape = (c.layers, 2, c.n_kv_heads, self.T, c.head_dim)
        self.page_bytes = 4 * math.prod(self.page_shape)
        self.registered = []

    def new_kv(self):
        """A zeroed KV tensor for one request (its block table is the
        identity: page i of the request is kv[i]), registered with the pool
        when the pool takes it (registration only picks the fastest path)."""
        pages = (self.max_pos + self.T - 1) // self.T
        kv = torch.zeros((pages,) + self.page_shape, dtype=torch.float32, device=self.device)
        if self.store is not None:
            rc = self.store.register_buffer(kv.data_ptr(), kv.numel() * 4)
            if rc == 0:
                self.registered.append(kv.data_ptr())
        return kv

    def close(self):
        for p in self.registered:
            self.store.unregister_buffer(p)
        self.registered = []

    def sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def page_ptr(self, kv, i):
        return kv.data_ptr() + i * self.page_bytes

    def lookup(self, keys, limit):
        """How many leading pages of keys the pool has (at most limit)."""
        if not keys or limit <= 0:
            return 0
        exist = self.store.batch_is_exist(keys[:limit])
        n = 0
        while n < len(exist) and exist[n] == 1:
            n += 1
        return n

    def load(self, kv, keys, n):
        """Reads pages 0..n-1 into kv; returns how many leading pages came
        whole (a page evicted since the lookup ends the reuse there) and
        the first failed page's code (0 if none)."""
        if n == 0:
            return 0, 0
        self.sync()
        got = self.store.batch_get_into(keys[:n], [self.page_ptr(kv, i) for i in range(n)],
                                        [self.page_bytes] * n)
        self.sync()
        ok = 0
        while ok < n and got[ok] == self.page_bytes:
            ok += 1
        return ok, (got[ok] if ok < n else 0)

    def store_pages(self, kv, keys, first):
        """Puts pages first.. of keys in one batch, in chain order; pred names
        the cached page they extend when the module takes it. Returns
        (pages stored, how pred went)."""
        if first >= len(keys):
            return 0, "nothing to store"
        self.sync()
        ks = keys[first:]
        ptrs = [self.page_ptr(kv, i) for i in range(first, len(keys))]
        sizes = [self.page_bytes] * len(ks)
        pred = "none (chain starts here)"
        if first > 0:
            try:
                rcs = self.store.batch_put_from(ks, ptrs, sizes, pred=keys[first - 1])
                pred = "page %d's key, the cached page they extend" % (first - 1)
            except TypeError:
                rcs = self.store.batch_put_from(ks, ptrs, sizes)
                pred = "not supported by this kvpool module (stored without it)"
        else:
            rcs = self.store.batch_put_from(ks, ptrs, sizes)
        bad = [(k, rc) for k, rc in zip(ks, rcs) if rc != 0]
        if bad:
            raise RuntimeError("batch_put_from: %d of %d pages failed, first %s: %d %s"
                               % (len(bad), len(ks), bad[0][0], bad[0][1],
                                  self.store.last_error()))
        return len(ks), pred

    def page_digests(self, kv, n):
        """SHA-256 of pages 0..n-1 as the pool holds them (host bytes)."""
        host = kv[:n].cpu().contiguous() if n else kv[:0].cpu()
        base = host.data_ptr()
        return [hashlib.sha256(ctypes.string_at(base + i * self.page_bytes,
                                                self.page_bytes)).hexdigest()
                for i in range(n)]

    def prefill_with_pool(self, tokens, keys, kv):
        """The engine's path: lookup, load, compute the rest. At least the
        last token is computed (its logits give the first new token)."""
        t0 = time.perf_counter()
        limit = (len(tokens) - 1) // self.T
        cached = self.lookup(keys, limit)
        t1 = time.perf_counter()
        loaded, err = self.load(kv, keys, cached)
        t2 = time.perf_counter()
        if err:
            self.log("page %d of %d did not load (%d %s): recomputing from there", loaded,
                     cached, err, self.store.last_error())
        start = loaded * self.T
        logits = self.model.forward(tokens[start:], start, kv, logits_from=start)
        first = int(logits[-1].argmax())
        self.sync()
        t3 = time.perf_counter()
        return {"cached_pages": cached, "loaded_pages": loaded, "reused_tokens": start,
                "logits": logits, "first": first, "lookup_s": t1 - t0, "load_s": t2 - t1,
                "prefill_s": t3 - t2, "ttft_s": t3 - t0}

    def decode(self, first, pos, kv, steps):
        """Greedy: feeds first at pos, then each argmax; returns the tokens
        and the logits of each step."""
        toks, outs = [first], []
        for i in range(steps - 1):
            lg = self.model.forward(torch.tensor([toks[-1]], device=self.device), pos + i, kv)
            outs.append(lg[-1])
            toks.append(int(lg[-1].argmax()))
        return toks, outs


# ---- the roles ---------------------------------------------------------------

class Out:
    """Human lines on stdout, or on stderr with --json (stdout is the JSON)."""

    def __init__(self, as_json):
        self.f = sys.stderr if as_json else sys.stdout

    def __call__(self, fmt, *a):
        print(fmt % a if a else fmt, file=self.f, flush=True)


def open_store(args, log):
    try:
        import kvpool
    except ImportError as e:
        log("cannot import kvpool (%s): build it with `make python` and run with "
            "PYTHONPATH=build/python", e)
        sys.exit(2)
    store = kvpool.MooncakeDistributedStore()
    cfg = {}
    if args.master:
        cfg["master_server_addr"] = args.master
    if args.config:
        cfg["config_file"] = args.config
    rc = store.setup(cfg) if cfg else store.setup()
    if rc != 0:
        log("kvpool setup failed: %d %s", rc, store.last_error())
        sys.exit(2)
    return store


def describe(e, log, role, tokens):
    c = e.cfg
    threads = torch.get_num_threads()
    log("[%s] device: %s (torch %s%s)", role, e.device, torch.__version__,
        ", %d threads" % threads if e.device.type == "cpu" else
        ", " + torch.cuda.get_device_name(e.device))
    log("[%s] model: %d layers, d_model %d, %d heads / %d KV heads, SwiGLU %d, vocab %d, "
        "fp32, seed %d; fingerprint %s", role, c.layers, c.d_model, c.n_heads, c.n_kv_heads,
        c.ffn, c.vocab, c.seed, e.fp[:16])
    log("[%s] prompt: %d tokens (%d shared prefix + %d own); pages of %d tokens, %d KiB each",
        role, len(tokens), e.args.prefix_tokens, len(tokens) - e.args.prefix_tokens, e.T,
        e.page_bytes >> 10)


def warm_up(e):
    """One small forward, so neither timed run pays for the first call."""
    kv = torch.zeros((2,) + e.page_shape, device=e.device)
    e.model.forward(torch.zeros(min(e.T, 8), dtype=torch.long, device=e.device), 0, kv)
    e.sync()


def start_role(args, log, role):
    """An engine on the pool, its prompt (A's or B's), its page keys, warmed up."""
    e = Engine(args, open_store(args, log), log)
    a_tokens, b_tokens = prompts(e.cfg, args.prefix_tokens, args.suffix_tokens, args.seed)
    tokens = (a_tokens if role == "A" else b_tokens).to(e.device)
    ns, keys = page_keys(e.fp, tokens.cpu(), e.T)
    describe(e, log, role, tokens)
    warm_up(e)
    return e, tokens, ns, keys


def role_a(args, log):
    e, tokens, ns, keys = start_role(args, log, "A")
    kv = e.new_kv()
    r = e.prefill_with_pool(tokens, keys, kv)
    log("[A] prefill: %d tokens in %.3f s (%d reused from the pool), first token %d",
        len(tokens) - r["reused_tokens"], r["prefill_s"], r["reused_tokens"], r["first"])
    t0 = time.perf_counter()
    stored, pred = e.store_pages(kv, keys, r["loaded_pages"])
    t1 = time.perf_counter()
    log("[A] stored %d pages (%.1f MiB) with batch_put_from in %.1f ms; pred: %s",
        stored, stored * e.page_bytes / 2 ** 20, (t1 - t0) * 1e3, pred)
    man = {"fingerprint": e.fp, "page_tokens": e.T, "page_bytes": e.page_bytes,
           "pages": [[k, d] for k, d in zip(keys, e.page_digests(kv, len(keys)))]}
    mkey = ns + "/manifest/" + keys[-1].rsplit("/", 1)[1] if keys else ns + "/manifest/empty"
    rc = e.store.upsert(mkey, json.dumps(man).encode())
    if rc != 0:
        log("[A] manifest upsert failed: %d %s", rc, e.store.last_error())
        return 1, {}
    log("[A] manifest: %s (%d pages, SHA-256 each)", mkey, len(keys))
    e.close()
    e.store.close()
    return 0, {"role": "a", "device": str(e.device), "fingerprint": e.fp,
               "prompt_tokens": len(tokens), "pages": len(keys), "stored_pages": stored,
               "reused_tokens": r["reused_tokens"], "prefill_s": r["prefill_s"],
               "pred": pred, "manifest": mkey}


def check_kv_against_manifests(e, store, kv, keys, n, manifests):
    """(verdict, pages verified, detail): the SHA-256 of each loaded page
    against what the manifests say A stored under that key."""
    if n == 0:
        return "ok", 0, "no page loaded"
    if not manifests:
        return "skipped", 0, "no --manifest given"
    want = {}
    for mk in manifests:
        raw = store.get(mk)
        if not raw:
            return "fail", 0, "manifest %s is not in the pool" % mk
        m = json.loads(raw)
        if m["page_tokens"] != e.T or m["page_bytes"] != e.page_bytes:
            continue
        want.update({k: d for k, d in m["pages"]})
    got = e.page_digests(kv, n)
    verified = 0
    for i in range(n):
        d = want.get(keys[i])
        if d is None:
            continue
        if d != got[i]:
            return "fail", verified, "page %d (%s) differs from the manifest's SHA-256" % (
                i, keys[i])
        verified += 1
    if verified == 0:
        return "fail", 0, "none of the %d loaded pages is in the manifest" % n
    rest = n - verified
    return "ok", verified, "%d pages bitwise as A stored them%s" % (
        verified, "; %d not in the manifest (stored by another writer)" % rest if rest else "")


def role_b(args, log):
    e, tokens, _, keys = start_role(args, log, "B")
    kv_pool, kv_full = e.new_kv(), e.new_kv()
    n = len(tokens)

    # Timed in this one process: the pool path, then the full prefill,
    # --repeat rounds (the best of each counts: the machine may be busy).
    best = None
    ttft_full = float("inf")
    for _ in range(args.repeat):
        r = e.prefill_with_pool(tokens, keys, kv_pool)
        if best is None or r["ttft_s"] < best["ttft_s"]:
            best = r
        start = r["reused_tokens"]
        t0 = time.perf_counter()
        full_logits = e.model.forward(tokens, 0, kv_full, logits_from=start)
        full_first = int(full_logits[-1].argmax())
        e.sync()
        ttft_full = min(ttft_full, time.perf_counter() - t0)
    for k in ("lookup_s", "load_s", "prefill_s", "ttft_s"):
        r[k] = best[k]

    log("[B] pool: %d of %d pages cached, %d loaded: reusing %d tokens, computing %d",
        r["cached_pages"], len(keys), r["loaded_pages"], start, n - start)

    ok = True
    kv_verdict, verified, detail = check_kv_against_manifests(
        e, e.store, kv_pool, keys, r["loaded_pages"], args.manifest)
    if kv_verdict == "fail":
        ok = False
    log("[B] check kv bytes: %s (%s)", kv_verdict.upper() if kv_verdict == "fail" else
        kv_verdict, detail)
    kv_diff = 0.0
    if start:
        kv_diff = float((kv_pool[:r["loaded_pages"]] - kv_full[:r["loaded_pages"]]).abs().max())
    log("[B] loaded KV vs this process's recompute: max abs diff %.3g", kv_diff)

    toks_pool, steps_pool = e.decode(r["first"], n, kv_pool, args.generate)
    toks_full, steps_full = e.decode(full_first, n, kv_full, args.generate)
    diffs = [float((r["logits"] - full_logits).abs().max())]
    diffs += [float((a - b).abs().max()) for a, b in zip(steps_pool, steps_full)]
    max_diff = max(diffs)
    logits_ok = max_diff <= LOGIT_TOL
    ok &= logits_ok
    log("[B] check logits: %s (max abs diff %.3g over %d prompt positions and %d decode steps, "
        "limit %g)", "ok" if logits_ok else "FAIL", max_diff, n - start, len(steps_pool),
        LOGIT_TOL)
    tokens_ok = toks_pool == toks_full
    ok &= tokens_ok
    log("[B] check greedy tokens: %s (%d generated%s)", "ok" if tokens_ok else "FAIL",
        len(toks_pool), ", identical" if tokens_ok else
        ": pool %s, recompute %s" % (toks_pool, toks_full))
    log("[B] generated: %s", " ".join(map(str, toks_pool)))
    log("[B] ttft with the pool: %.3f s (lookup %.1f ms, load %d pages %.1f ms, "
        "prefill %d tokens %.3f s)", r["ttft_s"], r["lookup_s"] * 1e3, r["loaded_pages"],
        r["load_s"] * 1e3, n - start, r["prefill_s"])
    log("[B] ttft without the pool: %.3f s (prefill %d tokens); %.1fx", ttft_full, n,
        ttft_full / r["ttft_s"] if r["ttft_s"] else 0.0)
    log("[B] reused %d of %d prompt tokens", start, n)

    stored, pred = e.store_pages(kv_pool, keys, r["loaded_pages"])
    log("[B] stored its %d new pages; pred: %s", stored, pred)
    log("[B] verdict: %s", "PASS" if ok else "FAIL")
    e.close()
    e.store.close()
    return (0 if ok else 1), {
        "role": "b", "device": str(e.device), "fingerprint": e.fp, "prompt_tokens": n,
        "pages": len(keys), "cached_pages": r["cached_pages"],
        "loaded_pages": r["loaded_pages"], "reused_tokens": start, "computed_tokens": n - start,
        "ttft_pool_s": r["ttft_s"], "ttft_full_s": ttft_full, "lookup_s": r["lookup_s"],
        "load_s": r["load_s"], "prefill_s": r["prefill_s"], "kv_check": kv_verdict,
        "kv_pages_verified": verified, "kv_vs_recompute_max_diff": kv_diff,
        "max_logit_diff": max_diff, "logits_ok": logits_ok, "tokens_ok": tokens_ok,
        "generated": toks_pool, "stored_pages": stored, "pred": pred, "ok": ok}


def child_args(args, role):
    a = [sys.executable, os.path.abspath(__file__), "--role", role, "--json",
         "--device", args.device, "--page-tokens", str(args.page_tokens),
         "--prefix-tokens", str(args.prefix_tokens), "--suffix-tokens", str(args.suffix_tokens),
         "--layers", str(args.layers), "--seed", str(args.seed), "--generate", str(args.generate),
         "--repeat", str(args.repeat)]
    if args.master:
        a += ["--master", args.master]
    if args.config:
        a += ["--config", args.config]
    return a


def role_both(args, log):
    """A, then B, each a process of its own; their lines are passed on as
    they come (to stderr with --json), their JSON results are read here."""
    res = {}
    for role in ("a", "b"):
        cmd = child_args(args, role)
        if role == "b" and res["a"].get("manifest"):
            cmd += ["--manifest", res["a"]["manifest"]]
        sys.stdout.flush()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                           stderr=None if args.json else sys.stdout)
        try:
            res[role] = json.loads(p.stdout)
        except ValueError:
            res[role] = {}
        if p.returncode != 0 or not res[role]:
            log("instance %s failed (exit %d)", role.upper(), p.returncode)
            return 1, {"ok": False, "a": res.get("a"), "b": res.get("b")}
    b = res["b"]
    log("")
    log("summary (%s): B reused %d of %d prompt tokens from A's pages; TTFT %.3f s with the "
        "pool, %.3f s without (%.1fx); max logit diff %.3g; kv bytes %s; greedy tokens %s",
        b["device"], b["reused_tokens"], b["prompt_tokens"], b["ttft_pool_s"],
        b["ttft_full_s"], b["ttft_full_s"] / b["ttft_pool_s"], b["max_logit_diff"],
        b["kv_check"], "identical" if b["tokens_ok"] else "DIFFER")
    return (0 if b["ok"] else 1), {"ok": b["ok"], "a": res["a"], "b": b}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=("both", "a", "b"), default="both",
                    help="a: prefill and store; b: reuse and check; both (default): A then B "
                    "as two processes")
    ap.add_argument("--master", help="the pool's master, host:port (default: what "
                    "kvpool's setup() reads from MOONCAKE_*/KVPOOL_* and /etc/kvpool)")
    ap.add_argument("--config", help="a kvpool INI to load (cluster.master, token_file, ...)")
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, "
                    "cuda:N")
    ap.add_argument("--page-tokens", type=int, default=16, help="tokens per KV page (16)")
    ap.add_argument("--prefix-tokens", type=int, default=1000,
                    help="tokens A and B share: system prompt + document (1000)")
    ap.add_argument("--suffix-tokens", type=int, default=256,
                    help="tokens after the prefix, different for A and B (256)")
    ap.add_argument("--layers", type=int, default=4,
                    help="decoder layers (4); another count is another model")
    ap.add_argument("--seed", type=int, default=0, help="weights and prompts")
    ap.add_argument("--generate", type=int, default=16, help="tokens B generates greedily")
    ap.add_argument("--repeat", type=int, default=2,
                    help="B: timed rounds of each path; the best counts")
    ap.add_argument("--manifest", action="append", default=[],
                    help="B: the key of A's manifest (A prints it); repeatable")
    ap.add_argument("--json", action="store_true",
                    help="print the result as one JSON object (human lines to stderr)")
    args = ap.parse_args()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.page_tokens < 1 or args.prefix_tokens < 0 or args.suffix_tokens < 1 or \
            args.layers < 1 or args.generate < 1 or args.repeat < 1:
        ap.error("--page-tokens, --suffix-tokens, --layers, --generate, --repeat must be >= 1")
    if torch.device(args.device).type == "cuda":
        # fp32 means fp32: no TF32 matmuls, or the 1e-4 check means nothing
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    log = Out(args.json)
    rc, res = {"a": role_a, "b": role_b, "both": role_both}[args.role](args, log)
    if args.json:
        print(json.dumps(res, indent=1))
    sys.exit(rc)


if __name__ == "__main__":
    main()
