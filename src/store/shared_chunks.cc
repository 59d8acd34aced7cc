#include "store/shared_chunks.h"

#include <algorithm>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "format/keys.h"

namespace ckptdb {

std::vector<ReuseCandidate> ReuseCandidatesFrom(StepMetadata base, const StepMetadata& planned) {
  std::vector<ReuseCandidate> out;
  size_t most = 0;
  for (const EntryMetadata& e : planned.entries) most += e.pieces.size();
  out.reserve(most);  // (a step of a thousand ranks has a piece per rank and entry)
  std::unordered_map<std::string_view, EntryMetadata*> by_fqn;
  for (EntryMetadata& e : base.entries) by_fqn.emplace(e.fqn, &e);
  auto usable = [](const StoredPiece& p) { return !p.chunk_hashes.empty() && p.encoding != 0; };
  auto same_region = [](const StoredPiece& a, const StoredPiece& b) {
    return a.offsets == b.offsets && a.sizes == b.sizes;
  };
  for (const EntryMetadata& e : planned.entries) {
    auto found = by_fqn.find(e.fqn);
    if (found == by_fqn.end() || found->second->kind != e.kind || found->second->dtype != e.dtype ||
        found->second->shape != e.shape) {
      continue;
    }
    std::vector<StoredPiece>& stored = found->second->pieces;
    // The usual case, a layout saved again: the pieces in the same order.
    bool in_order = stored.size() == e.pieces.size();
    for (size_t i = 0; in_order && i < stored.size(); ++i) in_order = same_region(stored[i], e.pieces[i]);
    if (in_order) {
      for (size_t i = 0; i < stored.size(); ++i) {
        if (usable(stored[i])) {
          out.push_back(ReuseCandidate{e.pieces[i].key, base.step, base.save_id, std::move(stored[i])});
        }
      }
      continue;
    }
    // Else by region: the stored pieces sorted by (offsets, sizes), each
    // planned piece looked up.
    std::vector<StoredPiece*> regions;
    regions.reserve(stored.size());
    for (StoredPiece& p : stored) {
      if (usable(p)) regions.push_back(&p);
    }
    auto before = [](const StoredPiece* a, const StoredPiece* b) {
      return std::tie(a->offsets, a->sizes) < std::tie(b->offsets, b->sizes);
    };
    auto region_before = [&](const StoredPiece* a, const StoredPiece& p) { return before(a, &p); };
    std::stable_sort(regions.begin(), regions.end(), before);
    // (Regions of one step are disjoint: at most one matches.)
    regions.erase(std::unique(regions.begin(), regions.end(),
                              [&](const StoredPiece* a, const StoredPiece* b) { return same_region(*a, *b); }),
                  regions.end());
    // (Each stored piece is taken once: the regions a plan gives an entry
    // are disjoint.)
    std::vector<char> taken(regions.size(), 0);
    for (const StoredPiece& p : e.pieces) {
      auto r = std::lower_bound(regions.begin(), regions.end(), p, region_before);
      const size_t k = static_cast<size_t>(r - regions.begin());
      if (r != regions.end() && !taken[k] && same_region(**r, p)) {
        taken[k] = 1;
        out.push_back(ReuseCandidate{p.key, base.step, base.save_id, std::move(**r)});
      }
    }
  }
  return out;
}

std::vector<KeyRange> MergeRanges(std::vector<KeyRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<KeyRange> out;
  for (KeyRange& r : ranges) {
    if (r.first >= r.second) continue;
    if (!out.empty() && r.first <= out.back().second) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::vector<KeyRange> SubtractRanges(const std::vector<KeyRange>& from, const std::vector<KeyRange>& cut) {
  std::vector<KeyRange> out;
  size_t c = 0;
  for (const KeyRange& r : from) {
    std::string begin = r.first;
    while (c < cut.size() && cut[c].second <= begin) ++c;
    size_t k = c;
    while (k < cut.size() && cut[k].first < r.second) {
      if (cut[k].first > begin) out.emplace_back(begin, cut[k].first);
      begin = std::max(begin, cut[k].second);
      ++k;
    }
    if (begin < r.second) out.emplace_back(begin, r.second);
  }
  return out;
}

void AddReferencedRanges(const StepMetadata& m, const std::set<int64_t>& steps, std::vector<KeyRange>* out) {
  for (const EntryMetadata& e : m.entries) {
    for (const StoredPiece& p : e.pieces) {
      for (const ChunkReference& r : p.references) {
        if (steps.count(r.step) == 0) continue;
        // chunk + count <= 2^32 - 1 (validated), so the end key is exact.
        out->emplace_back(EncodeDataKey(DataKey{r.step, r.save_id, r.key.rank, r.key.item, r.chunk}),
                          EncodeDataKey(DataKey{r.step, r.save_id, r.key.rank, r.key.item, r.chunk + r.count}));
      }
    }
  }
}

namespace {

Status UnreadableReferences(int64_t step, const std::string& what) {
  const std::string s = std::to_string(step);
  return Status::DataLoss("the chunk references of step " + s +
                          " are unreadable (its references record and its metadata are damaged): nothing can be " +
                          what + " safely while it stays; delete step " + s + " first");
}

}  // namespace

StatusOr<std::map<SaveRef, std::vector<KeyRange>>> UsedRangesOfSharedSaves(const SharedChunkView& view) {
  for (const auto& [k, refs] : view.kept_refs) {
    if (!refs) return UnreadableReferences(k, "rewritten");
  }
  std::map<SaveRef, std::vector<KeyRange>> used;
  std::set<SaveRef> unknown;  // referred to by a step whose exact chunks are unknown
  for (const auto& [k, refs] : view.kept_refs) {
    std::set<int64_t> steps;
    std::vector<SaveRef> unowned;
    for (const SaveRef& t : *refs) {
      if (view.kept_owns(t)) continue;
      used[t];
      unowned.push_back(t);
      steps.insert(t.step);
    }
    if (unowned.empty()) continue;
    StatusOr<StepMetadata> md = view.metadata_of(k);
    if (!md.ok()) {
      unknown.insert(unowned.begin(), unowned.end());
      continue;
    }
    std::vector<KeyRange> ranges;
    AddReferencedRanges(*md, steps, &ranges);
    for (KeyRange& r : ranges) {
      DataKey key;
      if (!ParseDataKey(r.first, &key)) continue;
      // (A reference into a save of the same step number that a committed
      // step owns is not this function's business.)
      auto u = used.find(SaveRef{key.step, key.save_id});
      if (u != used.end()) u->second.push_back(std::move(r));
    }
  }
  for (const SaveRef& t : unknown) used.erase(t);
  for (auto it = used.begin(); it != used.end();) {
    it->second = MergeRanges(std::move(it->second));
    // A step's references record names the save, but its metadata uses no
    // chunk of it: the two disagree (never written so), so keep it all.
    it = it->second.empty() ? used.erase(it) : std::next(it);
  }
  return used;
}

StatusOr<std::vector<KeyRange>> DataRangesToDrop(const std::set<int64_t>& deleted, const SharedChunkView& view) {
  for (const auto& [k, refs] : view.kept_refs) {
    if (!refs) return UnreadableReferences(k, "deleted");
  }
  std::vector<KeyRange> drop;
  std::set<int64_t> touched = deleted;  // steps whose data keys may be dropped
  for (int64_t s : deleted) drop.emplace_back(DataSaveBegin(s, 0), DataSaveEnd(s, UINT64_MAX));
  // Saves the deleted steps referred to, left over from steps deleted
  // before (no committed step owns them any more): their chunks go with the
  // last step using them.
  for (const auto& [s, refs] : view.deleted_refs) {
    if (!refs) continue;  // unknown: whatever it referred to stays (the safe side)
    for (const SaveRef& t : *refs) {
      if (deleted.count(t.step) > 0) continue;
      if (view.kept_owns(t)) continue;  // a step that stays owns it
      drop.emplace_back(DataSaveBegin(t.step, t.save_id), DataSaveEnd(t.step, t.save_id));
      touched.insert(t.step);
    }
  }
  // What the steps that stay refer to within those saves is kept.
  std::vector<KeyRange> keep;
  for (const auto& [k, refs] : view.kept_refs) {
    std::set<int64_t> steps;
    for (const SaveRef& t : *refs) {
      if (touched.count(t.step) > 0) steps.insert(t.step);
    }
    if (steps.empty()) continue;
    StatusOr<StepMetadata> md = view.metadata_of(k);
    if (!md.ok()) {
      // Its exact chunks are unknown: keep the whole saves it refers to.
      for (const SaveRef& t : *refs) {
        if (steps.count(t.step) > 0) keep.emplace_back(DataSaveBegin(t.step, t.save_id), DataSaveEnd(t.step, t.save_id));
      }
      continue;
    }
    AddReferencedRanges(*md, steps, &keep);
  }
  return SubtractRanges(MergeRanges(std::move(drop)), MergeRanges(std::move(keep)));
}

}  // namespace ckptdb
