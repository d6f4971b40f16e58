module github.com/bulkaction/bulkaction/deployments/healthprobe

go 1.26.8
