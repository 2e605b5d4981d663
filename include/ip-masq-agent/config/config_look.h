// SPDX-License-Identifier: Apache-2.0
// Why the loop asks for the config to be looked at: a loop's notion, with no config type,
// so that the daemon (which sees none) and the config source share one enum.
#pragma once

namespace ipmasq {

enum class ConfigLook {
	ifDue,  // only if a change has settled or the absent grace time has run out
	resync, // the safety net: also if stat() shows another file, size or timestamp
	reload, // SIGHUP or start-up: read it now
};

} // namespace ipmasq
