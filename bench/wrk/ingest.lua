-- wrk script: POSTs with many customers, machines and tokens (not one hot key).
-- Usage: wrk ... -s ingest.lua <url> -- <targets file> <body file>
-- targets file: one "path<TAB>token" per line; body file: the JSON body sent with every request.
-- A body containing @@ID@@ is a template: every request gets it with @@ID@@ replaced by an id of
-- its own (metrics records are deduplicated by client_metric_id, so a fixed body would measure
-- only the duplicate path).
local reqs = {}
local targets = {}
local template = nil
local prefix = ""
local seq = 0
local n = 0
local i = 0

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function headers(token)
  return { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token }
end

function init(args)
  local body = read(args[2])
  if body:find("@@ID@@", 1, true) then template = body end
  for line in io.lines(args[1]) do
    local path, token = line:match("^([^\t]+)\t(.+)$")
    if path then
      n = n + 1
      if template then
        targets[n] = { path, headers(token) }
      else
        reqs[n] = wrk.format("POST", path, headers(token), body)
      end
    end
  end
  -- LuaJIT's math.random starts from a fixed seed: the time makes ids differ between runs.
  math.randomseed(os.time())
  prefix = string.format("%x-%x", os.time(), math.random(0, 0xffffff))
  -- Each thread starts at a different place in the list.
  i = math.random(n) - 1
end

function request()
  i = i % n + 1
  if not template then return reqs[i] end
  seq = seq + 1
  local t = targets[i]
  local body = template:gsub("@@ID@@", prefix .. "-" .. seq)
  return wrk.format("POST", t[1], t[2], body)
end
