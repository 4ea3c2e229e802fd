-- wrk script: POSTs with many customers, machines and tokens (not one hot key).
-- Usage: wrk ... -s ingest.lua <url> -- <targets file> <body file>
-- targets file: one "path<TAB>token" per line; body file: the JSON body sent with every request.
local reqs = {}
local n = 0
local i = 0

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

function init(args)
  local body = read(args[2])
  for line in io.lines(args[1]) do
    local path, token = line:match("^([^\t]+)\t(.+)$")
    if path then
      n = n + 1
      reqs[n] = wrk.format("POST", path, {
        ["Content-Type"] = "application/json",
        ["Authorization"] = "Bearer " .. token,
      }, body)
    end
  end
  -- Each thread starts at a different place in the list.
  i = math.random(n) - 1
end

function request()
  i = i % n + 1
  return reqs[i]
end
