// SPDX-License-Identifier: Apache-2.0
// The element update: a change of set elements only, sent as element removals and
// additions instead of a replacement of the table, guarded by the ruleset generation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/nft/table_backend.h"

namespace ipmasq {

// A change of set elements only is sent as an element update, guarded by the generation
// at which the kernel is known to hold what the agent last wrote. When someone else has
// committed since (kube-proxy commits on every Service change), one read of the table
// (check) says whether it is still that; then the update is sent guarded by the
// generation of that read. Refused again (a commit in between), it is read and sent
// again, up to this many times, before the table is replaced instead.
inline constexpr int kUpdateRaces = 3;

// The element-level update from `applied` to `desired`, when the kernel is known to hold
// `applied` (null: not known, because `unknownBecause`) and only elements differ, in fewer
// ranges than the desired sets hold; otherwise why the table is replaced instead.
struct UpdatePlan {
	std::optional<ElementDiff> diff;
	std::string replaceBecause;
};
UpdatePlan planElementUpdate(const Ruleset *applied, const std::string &unknownBecause, const Ruleset &desired);

// The update sent: committed at `generation`, or not, and why the table is replaced
// instead; `drift` when a read found the table changed outside the agent.
struct UpdateOutcome {
	std::optional<uint32_t> generation{};
	std::string replaceBecause{};
	bool drift = false;
};
// The update of `table`, guarded by `guard`, the generation the agent knows its table at,
// and after other commits by the generation of a read that found the table as `applied`
// (to which `guard` moves; see kUpdateRaces). Fails when such a read fails.
Result<UpdateOutcome> sendElementUpdate(TableBackend &backend, const std::string &table, const Ruleset &applied,
					const ElementDiff &diff, uint32_t &guard);

} // namespace ipmasq
