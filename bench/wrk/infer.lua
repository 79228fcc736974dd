-- wrk script: KServe v2 infer on the identity model, small FP32 tensor (1x16), keep-alive.
-- Usage: wrk -s bench/wrk/infer.lua http://HOST:PORT  [-- MODEL]
-- At the end prints one JSON line "WRK_JSON {...}" with the figures, for scripts to parse.
local model = "identity"
-- wrk formats the request after init(), so the path (which names the model) is set here.
function init(args)
  if args[1] then model = args[1] end
  wrk.path = "/v2/models/" .. model .. "/infer"
end
local values = {}
for i = 1, 16 do values[i] = string.format("%.1f", i) end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","data":[' ..
           table.concat(values, ",") .. ']}]}'

dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")
