// SPDX-License-Identifier: Apache-2.0
// The agent's own table as the kernel would hold it: the desired ruleset encoded by the
// encoder (objects.h) and read back through the codec (codec/decoder.h), as nft lists its
// own bytecode. The NAT diagnostics walk it beside other tables; the encoder names its
// rules with it.
#pragma once

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/nft/codec/model.h"

namespace ipmasq::netlink {
struct EncodedTable; // objects.h
}

namespace ipmasq::nft {

// The desired ruleset, encoded and decoded, sets and all.
Result<Table> agentTable(const Ruleset &ruleset);
// The same from objects already encoded; the named sets' elements only when asked (what
// the rules print needs the anonymous sets' alone).
Table decodeEncodedTable(const netlink::EncodedTable &encoded, bool namedSetElements);

} // namespace ipmasq::nft
