-- wrk script for a plain GET peer (e.g. NGINX answering a fixed 200); same JSON summary line.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
